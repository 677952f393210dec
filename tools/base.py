"""The contract every tool module follows, independent of MCP.

A tool module (``tools/<name>.py``) or package (``tools/<name>/__init__.py``) defines::

    TOOL = Tool(
        name="describe_kernel",
        title="Describe a kernel",
        description="...first line is the one-line summary...",
        input_model=Input,            # subclass of ToolInput
        output_model=Output,          # subclass of ToolOutput
        run=run,                      # async def run(inp: Input, ctx: ToolContext) -> Output
        read_only=True, idempotent=True, open_world=False,
    )

``server/`` turns each ``TOOL`` into an MCP tool (schemas, annotations, progress,
ledger, artifacts). Tools raise ``AgentError`` for anything the agent caused or can fix
(bad source, unknown kernel, timeout); the server turns it into an MCP ``ToolError``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .common.answer import catalogue_of, facts_of, summary_line
from .common.errors import AgentError  # noqa: F401 - re-exported: tools import it from here
from .common.expect import LANGUAGE, Catalogue, Facts, HypothesisAnswer, check, judge, parse

if TYPE_CHECKING:  # the sandbox package is only needed by tools that run jobs
    from ..sandbox.job import Job, JobResult


@contextmanager
def as_agent_error(*kinds: type[Exception]):
    """Re-raise `kinds` (e.g. kernels.WorkspaceError) as AgentError with the same message."""
    try:
        yield
    except kinds as exc:
        raise AgentError(str(exc)) from None


class ToolInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hypothesis: str | None = Field(
        default=None,
        description="What this call tests, in one sentence (e.g. 'splitting V tiles "
        "recomputes the FP32 normalisation'). Recorded in the experiment ledger and "
        "echoed with the verdict, so the answer can say whether the evidence supports it.",
    )
    expect: list[str] | None = Field(default=None, max_length=20, description=LANGUAGE)

    @field_validator("expect")
    @classmethod
    def _expect_parses(cls, conditions: list[str] | None) -> list[str] | None:
        for condition in conditions or []:
            parse(condition)  # a malformed condition fails here, before anything runs
        return conditions

    def has_baseline(self) -> bool:
        """Whether this call names a baseline, so conditions may name baseline.<field>."""
        return getattr(self, "baseline", None) is not None


class ToolOutput(BaseModel):
    experiment_id: str = Field(
        default="",
        description="Ledger id of this call; read it as experiment://{id}, compare it "
        "with compare_experiments, fetch its files as artifact://{id}/{name}.",
    )
    summary: str = Field(
        default="",
        description="One line a person can act on: the answer, and whether it supports "
        "the hypothesis when one was given.",
    )
    artifacts: list[str] = Field(
        default_factory=list, description="URIs (artifact://...) of files this call produced."
    )
    hypothesis_answer: HypothesisAnswer = Field(
        default_factory=HypothesisAnswer, description="The expect conditions judged over this output: "
        "supported, contradicted, inconclusive or not_judged (no expect), with each comparison's numbers.",
    )


Progress = Callable[[float, "float | None", str], Awaitable[None]]


class JobLimits(Protocol):
    memory_bytes: int  # the per-job memory cap (a cgroup), bytes


class Isolation(Protocol):
    level: str  # what is in force, e.g. "full", "partial", "none"

    def as_dict(self) -> dict: ...


class Sandbox(Protocol):
    """What tools use of infra_agent.sandbox.Sandbox: run a job, name a workspace file
    as a job sees it, and the facts a plan needs (device, limits, isolation)."""

    device: str  # "cuda" or "cpu": where jobs run
    limits: JobLimits
    isolation: Isolation

    async def run(self, job: Job, progress: Progress | None = None) -> JobResult: ...

    def workspace_path(self, host_path: Path) -> str: ...


class ToolContext(Protocol):
    """What the server hands a tool for one call."""

    workspace: Any  # infra_agent.kernels.workspace.Workspace
    experiment_id: str

    @property
    def sandbox(self) -> Sandbox:  # infra_agent.sandbox.Sandbox, started on first use
        ...

    async def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Report progress on a long call (forwarded as MCP progress notifications)."""

    def artifact(self, name: str, data: bytes | str | Path) -> str:
        """Store a file for this experiment; returns its artifact:// URI."""

    def experiment(self, experiment_id: str) -> dict | None:
        """A previous experiment from the ledger (for baselines), or None."""

    def read_artifact(self, experiment_id: str, name: str) -> str | None:
        """A text artifact a previous experiment stored (a baseline's records), or None."""

    @property
    def engines(self) -> Any:  # infra_agent.serving.lifecycle.Engines: the serving engines this server started
        ...

    def experiments(self, *, tool: str | None = None, kernel: str | None = None, since: float | None = None,
                    exclude_tools: tuple[str, ...] = (), run_id: str | None = None,
                    limit: int = 20) -> list[dict]:
        """Ledger rows, newest first, filtered by tool, kernel, start time (Unix s), agent run."""


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input_model: type[ToolInput]
    output_model: type[ToolOutput]
    run: Callable[[Any, ToolContext], Awaitable[ToolOutput]]
    read_only: bool = True
    idempotent: bool = False
    open_world: bool = False
    # Which argument names a kernel (for ledger filters); None if the tool has none.
    kernel_field: str | None = "kernel"
    # What `expect` may name, and how to read it off one call: (inp, out) -> Facts. Default: the
    # output's own top-level fields that are numbers, strings, true/false or lists.
    expect_catalogue: Catalogue | None = None
    expect_facts: Callable[[Any, Any], Facts] | None = None

    @property
    def catalogue(self) -> Catalogue:
        return self.expect_catalogue or catalogue_of(self.output_model)

    @property
    def full_description(self) -> str:
        """The description plus what `expect` may name (the agent reads this before the first call)."""
        return f"{self.description.rstrip()} expect can name: {self.catalogue.names()}."


async def run_tool(tool: Tool, inp: ToolInput, ctx: ToolContext) -> ToolOutput:
    """One call: the expect conditions are checked before anything runs, judged over the output after."""
    check(inp.expect, tool.catalogue, has_baseline=inp.has_baseline())
    out = await tool.run(inp, ctx)
    if not isinstance(out, tool.output_model):
        out = tool.output_model.model_validate(out)
    if inp.expect:
        facts = tool.expect_facts(inp, out) if tool.expect_facts else facts_of(out)
        out.hypothesis_answer = judge(inp.expect, facts, tool.catalogue)
        out.summary = f"{out.summary.rstrip('.')}. {summary_line(out.hypothesis_answer)}"
    return out
