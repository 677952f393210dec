"""`infra-agent eval`'s body: each task, in each run, gets a fresh workspace and state of its
own (its own ledger), a server that also offers submit_diagnosis, and one agent run of the
existing loop with the eval's budget (beside a busy neighbour, where the task plants one:
neighbour.py); then its last submission is graded against the task's truth and ledger, and
everything lands in one JSON results file.
"""

from __future__ import annotations

import contextlib
import secrets
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, Field

from ..agent import AgentConfig, run_agent
from .grade import TaskGrade, grade, host_measured
from .neighbour import BusyNeighbour
from .submit import NAME as SUBMIT
from .submit import Input as Submission
from .submit import offer_submit_tool
from .tasks import EvalTask, generate_tasks

ANSWER_FORM = (
    "\n\nWork with the tools. When you know the answer, call submit_diagnosis once with the cause "
    "(from its fixed vocabulary; 'none' if nothing is wrong), where it sits (kernel, impl, "
    "config_key where a config is to blame, thread where a thread is), the number where one "
    "applies, and the ids of the experiments whose answers show it. Then answer without a tool "
    "call."
)


@dataclass
class EvalConfig:
    base_url: str
    model: str
    out_dir: Path  # results.json and one folder per task and run (workspace, ledger, transcript)
    seed: int | None = None  # None: the runner draws one (a held-out variant set)
    tasks: list[str] | None = None  # task ids or families; default all
    runs: int = 1
    budget_calls: int = 30  # tool calls per task
    budget_s: float = 900.0  # wall clock per task
    max_steps: int = 30  # model turns per task
    api_key_env: str | None = "OPENAI_API_KEY"
    max_completion_tokens: int | None = 8192
    extra_body: dict = field(default_factory=dict)
    allow_unsandboxed: bool = False


class TaskRun(BaseModel):
    task_id: str
    category: str
    control: bool
    run: int = Field(description="Which repeat (0-based).")
    grade: TaskGrade
    submission: dict | None = Field(description="The last submit_diagnosis arguments, if any.")
    stop_reason: str = Field(description="How the agent run ended (answered, max_tool_calls, ...).")
    tool_calls: int = Field(description="Tool calls that ran, submit_diagnosis included.")
    model_turns: int | None = Field(
        description="Model turns; None where unknown (an MCP client's session)."
    )
    tokens: int | None = Field(
        description="Prompt + completion tokens over the task; None where unknown (an MCP "
        "client's session)."
    )
    wall_s: float = Field(
        description="Wall time of the agent run, seconds (an MCP client's session: from its "
        "first tool call's start to its last call's end)."
    )
    agent_run_id: str = Field(description="The agent run's id ('' for an MCP client's session).")
    folder: str = Field(
        description="This task run's folder (workspace/, its ledger, transcript.jsonl): the "
        "runner's path for it, or '.' for a graded MCP client session (the results file's own "
        "folder)."
    )
    planted: str | None = Field(
        None,
        description="What the runner planted beside the agent for this task (the starved "
        "client's busy neighbour, and how many load generators it starved); None: nothing.",
    )
    host_measured: str | None = Field(
        None,
        description="Why this run measured the host, not its task (grade.host_measured): with "
        "nothing planted beside it, a serve_benchmark the agent ran said its load generator "
        "waited for a CPU for much of its runs (client_starved; the experiment id first). Such a run "
        "is graded but left out of the scores, right or wrong (Score.void_runs counts it): run "
        "the task again on a quieter host. None: no benchmark said so.",
    )


class Score(BaseModel):
    num_runs: int = Field(description="Task runs scored (void runs left out).")
    void_runs: int = Field(
        0,
        description="Task runs left out of the scores because they measured the host, not "
        "their task (TaskRun.host_measured).",
    )
    correct: float = Field(description="Fraction of task runs graded correct (all criteria).")
    identified: float = Field(description="Fraction with the right cause.")
    localized: float | None = Field(description="Fraction localized, of those with a location.")
    number_ok: float | None = Field(
        description="Fraction within tolerance, of those with a number."
    )
    evidence_ok: float = Field(description="Fraction whose cited evidence holds.")
    correct_per_run: list[float] = Field(description="`correct` of each repeat: the spread.")
    mean_tool_calls: float
    mean_wall_s: float
    mean_tokens: float | None = Field(description="Over the task runs whose tokens are known.")


class EvalResults(BaseModel):
    model: str
    base_url: str
    seed: int
    seed_drawn: bool = Field(description="True when the runner drew the seed (a held-out set).")
    started_at: str
    budget: dict
    tasks: list[EvalTask]
    runs: list[TaskRun]
    per_task: dict[str, Score]
    per_category: dict[str, Score]
    overall: Score


async def run_eval(config: EvalConfig, api_key: str | None = None, on_task=None) -> EvalResults:
    """Run every task `config.runs` times; write and return the results. `on_task(TaskRun)` is
    called after each task run (progress)."""
    seed_drawn = config.seed is None
    seed = secrets.randbelow(2**31) if config.seed is None else config.seed
    tasks = generate_tasks(seed, config.tasks)
    for task in tasks:  # a plant this host cannot hold is refused before anything runs
        _neighbour(task)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    config.out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[TaskRun] = []
    for repeat in range(config.runs):
        for task in tasks:
            runs.append(await run_task(task, repeat, config, api_key))
            if on_task is not None:
                on_task(runs[-1])
    results = collect(
        model=config.model,
        base_url=config.base_url,
        seed=seed,
        seed_drawn=seed_drawn,
        started_at=started,
        budget={
            "tool_calls": config.budget_calls,
            "wall_s": config.budget_s,
            "model_turns": config.max_steps,
        },
        tasks=tasks,
        runs=runs,
    )
    write_results(results, config.out_dir)
    return results


def collect(*, tasks: list[EvalTask], runs: list[TaskRun], **fields) -> EvalResults:
    """The results of graded task runs: the runs plus their scores per task, per category and
    overall. `fields`: EvalResults' other fields (model, seed, ...)."""
    return EvalResults(
        **fields,
        tasks=tasks,
        runs=runs,
        per_task={t.id: score([r for r in runs if r.task_id == t.id]) for t in tasks},
        per_category={
            c: score([r for r in runs if r.category == c])
            for c in sorted({t.category for t in tasks})
        },
        overall=score(runs),
    )


RESULTS_FILE = "results.json"


def write_results(results: EvalResults, folder: Path) -> Path:
    path = folder / RESULTS_FILE
    path.write_text(results.model_dump_json(indent=2))
    return path


def read_results(folder: Path) -> EvalResults:
    """The results file in `folder` (ValueError saying what to do when there is none)."""
    path = folder / RESULTS_FILE
    if not path.is_file():
        raise ValueError(
            f"no {RESULTS_FILE} in {folder}: name the folder `infra-agent eval` wrote (its --out) "
            "or one `infra-agent eval grade` graded"
        )
    return EvalResults.model_validate_json(path.read_text())


def run_folder(results_dir: Path, run: TaskRun) -> Path:
    """A task run's folder as the results file names it: the runner's layout under the results
    folder (so a moved results folder still finds it), else its recorded path (relative: to
    the results folder, then to the current directory)."""
    for candidate in (
        results_dir / f"run{run.run}" / run.task_id,
        results_dir / run.folder,
        Path(run.folder),
    ):
        if (candidate / "workspace").is_dir():
            return candidate
    return results_dir / run.folder


def task_state_dir(folder: Path) -> Path:
    """Where a task run's workspace (`folder`/workspace) keeps its ledger, artifacts and
    caches (read without loading its kernel specs)."""
    from ...kernels.workspace import Workspace

    return Workspace(root=(folder / "workspace").resolve()).state_dir


async def run_task(task: EvalTask, repeat: int, config: EvalConfig, api_key: str | None) -> TaskRun:
    from ..app import build_server

    folder = config.out_dir / f"run{repeat}" / task.id
    workspace = task.build_workspace(folder / "workspace")
    server = build_server(workspace, allow_unsandboxed=config.allow_unsandboxed)
    offer_submit_tool(server)
    agent_config = AgentConfig(
        base_url=config.base_url,
        model=config.model,
        goal=task.question + ANSWER_FORM,
        api_key_env=config.api_key_env,
        max_steps=config.max_steps,
        max_time_s=config.budget_s,
        max_tool_calls=config.budget_calls,
        max_completion_tokens=config.max_completion_tokens,
        transcript_path=folder / "transcript.jsonl",
        extra_body=dict(config.extra_body),
        kernel_prompt=False,  # a diagnosis, not optimize_kernel's speed-up loop
    )
    neighbour = _neighbour(task)
    started = time.monotonic()
    try:
        async with neighbour or contextlib.nullcontext():
            result = await run_agent(server, agent_config, api_key)
        ledger = {row["id"]: row for row in server.state.ledger.query(limit=100_000)}
    finally:
        await server.aclose()
    submission, raw = last_submission(ledger, result.run_id)
    return TaskRun(
        task_id=task.id,
        category=task.category,
        control=task.control,
        run=repeat,
        grade=grade(task, submission, ledger),
        submission=raw,
        stop_reason=result.stop_reason,
        tool_calls=result.totals.num_tool_calls_run,
        model_turns=result.totals.steps,
        tokens=result.totals.tokens,
        wall_s=round(time.monotonic() - started, 3),
        agent_run_id=result.run_id,
        folder=str(folder),
        planted=neighbour.planted().describe() if neighbour else None,
        host_measured=host_measured(task, ledger),
    )


def _neighbour(task: EvalTask) -> BusyNeighbour | None:
    """The busy neighbour the task plants, if any (NeighbourError where this host cannot)."""
    return BusyNeighbour(**task.params["neighbour"]) if "neighbour" in task.params else None


def last_submission(
    ledger: dict[str, dict], run_id: str | None
) -> tuple[Submission | None, dict | None]:
    """The run's last submit_diagnosis that the tool accepted; `run_id` None: the ledger's
    last (an MCP client's session, whose calls name no agent run)."""
    rows = [
        r
        for r in ledger.values()
        if r["tool"] == SUBMIT and r["status"] == "ok" and run_id in (None, r.get("run_id"))
    ]
    if not rows:
        return None, None
    raw = max(rows, key=lambda r: (r["started_at"], r["seq"]))["arguments"]
    return Submission.model_validate(raw), raw  # the tool accepted these arguments already


def score(all_runs: list[TaskRun]) -> Score:
    """The scores over the runs that measured their task (a void run counts in void_runs only)."""

    def rate(values: list[bool | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(sum(known) / len(known), 4) if known else None

    runs = [r for r in all_runs if r.host_measured is None]
    per_run = sorted({r.run for r in runs})
    return Score(
        num_runs=len(runs),
        void_runs=len(all_runs) - len(runs),
        correct=rate([r.grade.correct for r in runs]) or 0.0,
        identified=rate([r.grade.identified for r in runs]) or 0.0,
        localized=rate([r.grade.localized for r in runs]),
        number_ok=rate([r.grade.number_ok for r in runs]),
        evidence_ok=rate([r.grade.evidence_ok for r in runs]) or 0.0,
        correct_per_run=[
            rate([r.grade.correct for r in runs if r.run == i]) or 0.0 for i in per_run
        ],
        mean_tool_calls=_mean([r.tool_calls for r in runs]),
        mean_wall_s=_mean([r.wall_s for r in runs]),
        mean_tokens=_mean([r.tokens for r in runs if r.tokens is not None])
        if any(r.tokens is not None for r in runs)
        else None,
    )


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 3) if values else 0.0
