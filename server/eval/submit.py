"""submit_diagnosis: the eval's answer form. The agent names a cause from the fixed
vocabulary, where it sits, a number where the question asks for one, and the experiment ids
its answer rests on. The call is an experiment like any other (the ledger keeps it); the
last submission of a run is the one graded.

Offered only where an answer is graded: `infra-agent eval` adds it to the server of each
task (`offer_submit_tool`); an ordinary session's tool list does not have it.
"""

from __future__ import annotations

from pydantic import Field

from ...tools.base import Tool, ToolContext, ToolInput, ToolOutput
from .tasks import CAUSE_MEANINGS, Cause

NAME = "submit_diagnosis"
VOCABULARY = "; ".join(f"{cause.value}: {meaning}" for cause, meaning in CAUSE_MEANINGS.items())


class Input(ToolInput):
    cause: Cause = Field(description=f"The cause, one of: {VOCABULARY}.")
    kernel: str | None = Field(
        None, description="Kernel where the cause sits (or the one checked, for 'none')."
    )
    impl: str | None = Field(
        None, description="Implementation of that kernel that carries the cause."
    )
    argument: str | None = Field(
        None, description="Argument of the entry function, if one is to blame."
    )
    config_key: str | None = Field(
        None, description="Launch or engine config key to blame, e.g. 'num_warps', 'max_num_seqs'."
    )
    thread: str | None = Field(None, description="Thread to blame, for system problems.")
    number: float | None = Field(
        None,
        description="The number the cause comes down to, where one applies (e.g. the num_warps "
        "a launcher asks for, the block size a tail is lost at), in that quantity's own unit.",
    )
    experiment_ids: list[str] = Field(
        default_factory=list,
        description="Ids of the experiments (this session's tool calls) whose answers show the "
        "cause, e.g. a failing check_numerics of that impl, a serve_benchmark of one config "
        "against another (baseline_handle=) whose attribution names the phase; for 'none', "
        "those that show it right.",
    )
    explanation: str = Field("", max_length=2000, description="Why, in a few sentences.")


class Output(ToolOutput):
    cause: str = Field(description="The cause recorded.")
    unknown_experiment_ids: list[str] = Field(
        description="Cited ids this session's ledger does not hold: they count as unsupported; "
        "submit again with ids from your own tool calls."
    )


async def run(inp: Input, ctx: ToolContext) -> Output:
    unknown = [i for i in inp.experiment_ids if ctx.experiment(i) is None]
    where = (
        "/".join(p for p in (inp.kernel, inp.impl, inp.config_key, inp.thread) if p)
        or "no location"
    )
    summary = f"diagnosis recorded: {inp.cause.value} at {where}"
    if unknown:
        summary += f"; not in this ledger: {', '.join(unknown)}"
    return Output(
        cause=inp.cause.value,
        unknown_experiment_ids=unknown,
        summary=summary
        + ". The last submission counts; answer without a tool call to end the run.",
    )


TOOL = Tool(
    name=NAME,
    title="Submit a diagnosis",
    description="Submit your final diagnosis for grading: the cause (fixed vocabulary), where it "
    "sits, a number if one applies, and the experiment ids it rests on. Call it once you are "
    "sure, then end the run by answering without a tool call.",
    input_model=Input,
    output_model=Output,
    run=run,
    kernel_field="kernel",
)


def offer_submit_tool(server) -> None:
    """Add submit_diagnosis to an InfraAgentServer's tools (the eval's servers only)."""
    server.tools[NAME] = TOOL
    server.state.tools = server.tools
