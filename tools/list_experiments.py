"""list_experiments: what was tried, newest first, from the experiment ledger."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

from pydantic import BaseModel, Field

from .base import AgentError, Tool, ToolContext, ToolInput, ToolOutput

# Calls that only read the ledger are bookkeeping, not experiments worth listing.
LEDGER_TOOLS = ("list_experiments", "compare_experiments")
DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Input(ToolInput):
    tool: str | None = Field(
        default=None, description="Only calls of this tool (e.g. 'microbench')."
    )
    kernel: str | None = Field(
        default=None, description="Only calls about this kernel (e.g. 'rmsnorm')."
    )
    since: str | None = Field(
        default=None,
        description="Only calls started at or after this time: an ISO-8601 timestamp "
        "('2026-11-30T02:00:00Z') or an age such as '30m', '2h', '1d'.",
    )
    run: str | None = Field(
        default=None,
        description="Only calls made by this agent run (the run id `infra-agent agent` prints "
        "and records, e.g. 'run-20261201T085000-3fa2').",
    )
    limit: int = Field(
        default=20, ge=1, le=500, description="Most experiments to return (newest first)."
    )
    sweep: str | None = Field(
        default=None,
        description="Only the trials of this sweep (its experiment id): the compiles, checks, "
        "timings or benchmarks a sweep_kernel/sweep_serve call made.",
    )
    include_trials: bool = Field(
        default=False,
        description="Also list sweeps' trials (hidden by default: a sweep makes dozens; each "
        "sweep's answer lists its own).",
    )
    include_ledger_queries: bool = Field(
        default=False,
        description="Also list list_experiments/compare_experiments calls themselves.",
    )


class ExperimentSummary(BaseModel):
    id: str = Field(description="Experiment id; read experiment://{id} for everything recorded.")
    tool: str = Field(description="Tool that was called.")
    kernel: str | None = Field(description="Kernel the call was about, if any.")
    hypothesis: str | None = Field(description="The hypothesis the call tested, if one was given.")
    status: str = Field(
        description="ok, error, running, or interrupted (the server died mid-call)."
    )
    started_at: str = Field(description="Start time, ISO-8601 UTC.")
    duration_ms: float | None = Field(description="Wall time of the call in milliseconds.")
    summary: str = Field(description="The call's one-line answer, or its error message.")
    git_commit: str | None = Field(
        description="Workspace git commit at the time (null: not a git repo)."
    )
    num_artifacts: int = Field(description="Number of artifact files the call stored.")
    artifacts_pruned_at: str | None = Field(
        default=None,
        description="When `infra-agent gc` deleted this call's artifacts (ISO-8601 UTC; its "
        "numbers remain); null while they are kept.",
    )
    run_id: str | None = Field(
        default=None, description="Agent run that made the call (null: not made by one)."
    )
    run_step: int | None = Field(
        default=None, description="Model turn of that run (1-based) that asked for it."
    )
    run_model: str | None = Field(default=None, description="Model name that agent run used.")
    parent_id: str | None = Field(
        default=None, description="The sweep this call was a trial of (null: the agent's own)."
    )


class Output(ToolOutput):
    experiments: list[ExperimentSummary] = Field(description="Matching experiments, newest first.")


def parse_since(since: str | None, now: float | None = None) -> float | None:
    if since is None:
        return None
    m = DURATION.match(since.strip())
    if m:
        return (now if now is not None else time.time()) - float(m.group(1)) * SECONDS[m.group(2)]
    try:
        dt = datetime.fromisoformat(since.strip().replace("Z", "+00:00"))
    except ValueError:
        raise AgentError(
            f"since={since!r} is neither an ISO-8601 time nor an age like '30m', '2h', '1d'"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def iso(ts: float) -> str:
    return (
        datetime.fromtimestamp(ts, tz=timezone.utc)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z")
    )


def summarise(row: dict) -> ExperimentSummary:
    result = row.get("result") or {}
    text = result.get("summary", "") if isinstance(result, dict) else ""
    if row["status"] != "ok":
        text = row.get("error") or row["status"]
    return ExperimentSummary(
        id=row["id"],
        tool=row["tool"],
        kernel=row.get("kernel"),
        hypothesis=row.get("hypothesis"),
        status=row["status"],
        started_at=iso(row["started_at"]),
        duration_ms=row["duration_s"] * 1e3 if row.get("duration_s") is not None else None,
        summary=text[:500],
        git_commit=row.get("git_commit"),
        num_artifacts=len(row.get("artifacts") or []),
        artifacts_pruned_at=iso(row["artifacts_pruned_at"])
        if row.get("artifacts_pruned_at")
        else None,
        run_id=row.get("run_id"),
        run_step=row.get("run_step"),
        run_model=row.get("run_model"),
        parent_id=row.get("parent_id"),
    )


async def run(inp: Input, ctx: ToolContext) -> Output:
    exclude = () if inp.include_ledger_queries or inp.tool in LEDGER_TOOLS else LEDGER_TOOLS
    rows = ctx.experiments(
        tool=inp.tool,
        kernel=inp.kernel,
        since=parse_since(inp.since),
        exclude_tools=exclude,
        run_id=inp.run,
        parent_id=inp.sweep,
        top_level=not (inp.include_trials or inp.sweep),
        limit=inp.limit,
    )
    # This call's own row is still open; it is not an answer to the question.
    experiments = [summarise(r) for r in rows if r["id"] != ctx.experiment_id]
    filters = ", ".join(
        f"{k}={v}"
        for k, v in (
            ("tool", inp.tool),
            ("kernel", inp.kernel),
            ("since", inp.since),
            ("run", inp.run),
            ("sweep", inp.sweep),
        )
        if v
    )
    return Output(
        experiments=experiments,
        summary=f"{len(experiments)} experiments" + (f" ({filters})" if filters else ""),
    )


TOOL = Tool(
    name="list_experiments",
    title="List experiments",
    description="List past tool calls from the experiment ledger, newest first, filtered by tool, kernel, "
    "start time, agent run or sweep: what was tried, with which hypothesis, and what it answered. A "
    "sweep's trials are listed with sweep=<its id> (or include_trials), not among the agent's calls.",
    input_model=Input,
    output_model=Output,
    run=run,
    idempotent=False,  # new experiments appear between calls
    kernel_field=None,  # `kernel` here is a filter, not the subject of the call
)
