"""An eval task answered by any MCP client (an IDE's agent, a person at `infra-agent call`)
instead of `infra-agent eval`'s own agent loop.

    infra-agent eval prepare --task ID [--seed S] DIR   the task's workspace in DIR/workspace,
                                                        the question, how to serve it
    infra-agent serve -w DIR/workspace --eval-submit    the server, with submit_diagnosis
    infra-agent eval grade DIR                          the session's last submission, graded
                                                        by the runner's grade() against the
                                                        task's truth and the workspace's ledger

DIR keeps only the task's id and seed (eval-session.json), never its truth: grading draws the
task again from them. `eval grade` writes DIR/results.json in the runner's form (one task
run, folder '.'), which `infra-agent eval report DIR` renders like any eval's.
"""

from __future__ import annotations

import secrets
import shlex
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, Field

from ..clients import launch_command
from ..ledger import read_only_rows
from .grade import grade, host_measured
from .runner import (
    ANSWER_FORM,
    EvalResults,
    TaskRun,
    collect,
    last_submission,
    task_state_dir,
    write_results,
)
from .tasks import EvalTask, generate_tasks

SESSION_FILE = "eval-session.json"
WORKSPACE = "workspace"
SESSION_STOP = "mcp_session"  # TaskRun.stop_reason of a graded MCP client session


class EvalSession(BaseModel):
    """What `eval prepare` leaves in DIR for `eval grade` (no truth: it is drawn again)."""

    task_id: str = Field(description="The task, e.g. 'kernel.stride'.")
    seed: int = Field(description="The seed its variant was drawn from.")
    seed_drawn: bool = Field(description="True when prepare drew the seed (a held-out variant).")
    prepared_at: str = Field(description="When the workspace was written (UTC, ISO 8601).")
    question: str = Field(description="What the session is asked, with the answer form.")


class SessionError(Exception):
    """A session folder that cannot be prepared or graded; the message says what to do."""


def prepare_session(task_id: str, seed: int | None, folder: Path) -> tuple[EvalSession, Path]:
    """Write the task's workspace into `folder`/workspace and the session file; return the
    session and the workspace's path."""
    if folder.exists() and any(folder.iterdir()):
        raise SessionError(f"{folder} is not empty; name a new or empty folder")
    drawn = seed is None
    seed = secrets.randbelow(2**31) if seed is None else seed
    task = _task(task_id, seed)
    if "neighbour" in task.params:
        raise SessionError(
            f"{task.id} plants a busy neighbour beside the load generator for as long as the "
            "agent works, which only the runner can hold: run it with `infra-agent eval "
            f"--tasks {task.id} ...` against a model's endpoint"
        )
    folder.mkdir(parents=True, exist_ok=True)
    workspace = task.build_workspace(folder / WORKSPACE)
    session = EvalSession(
        task_id=task.id,
        seed=seed,
        seed_drawn=drawn,
        prepared_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        question=task.question + ANSWER_FORM,
    )
    (folder / SESSION_FILE).write_text(session.model_dump_json(indent=2))
    return session, workspace


def serve_command(workspace: Path) -> str:
    """The command line an MCP client starts (stdio) to answer the session's task."""
    return shlex.join([*launch_command(), "--workspace", str(workspace.resolve()), "--eval-submit"])


def grade_session(folder: Path, client: str = "an MCP client") -> tuple[EvalResults, Path, int]:
    """Grade the session in `folder`: its last accepted submit_diagnosis against the task's
    truth and the workspace's own ledger. Writes `folder`/results.json; returns the results,
    that file, and how many experiments the ledger holds."""
    session = read_session(folder)
    task = _task(session.task_id, session.seed)
    rows = read_only_rows(task_state_dir(folder) / "ledger.sqlite")
    ledger = {row["id"]: row for row in rows}
    submission, raw = last_submission(ledger, None)
    calls = [r for r in rows if r.get("parent_id") is None]  # a sweep's trials are its own
    ends = [r.get("ended_at") or r["started_at"] for r in calls]
    run = TaskRun(
        task_id=task.id,
        category=task.category,
        control=task.control,
        run=0,
        grade=grade(task, submission, ledger),
        submission=raw,
        stop_reason=SESSION_STOP,
        tool_calls=len(calls),
        model_turns=None,
        tokens=None,
        wall_s=round(max(ends) - min(r["started_at"] for r in calls), 3) if calls else 0.0,
        agent_run_id="",
        folder=".",
        host_measured=host_measured(task, ledger),
    )
    results = collect(
        model=client,
        base_url="",
        seed=session.seed,
        seed_drawn=session.seed_drawn,
        started_at=session.prepared_at,
        budget={},
        tasks=[task],
        runs=[run],
    )
    return results, write_results(results, folder), len(rows)


def read_session(folder: Path) -> EvalSession:
    path = folder / SESSION_FILE
    if not path.is_file():
        raise SessionError(
            f"no {SESSION_FILE} in {folder}: name the folder `infra-agent eval prepare` wrote"
        )
    return EvalSession.model_validate_json(path.read_text())


def _task(task_id: str, seed: int) -> EvalTask:
    try:
        tasks = generate_tasks(seed, [task_id])  # an id or a family
    except ValueError as exc:
        raise SessionError(str(exc)) from None
    if len(tasks) != 1:
        every = ", ".join(t.id for t in generate_tasks(seed))
        raise SessionError(f"{task_id!r} names no single task; give one of: {every}")
    return tasks[0]
