"""`infra-agent eval`: the typer group (registered in server/cli/__init__.py).

    infra-agent eval --base-url ... --model ...   the runner: options -> EvalConfig, the key
                                                  from the environment, the run, a table on
                                                  stderr, the results file's path on stdout
    infra-agent eval prepare / grade DIR          a task answered by any MCP client (session.py)
    infra-agent eval report RESULTS_DIR           the results as pages (server/report/eval_site.py)

Exit codes of the run: 0 every task run was graded (whatever the scores), 1 the model API
failed for every task, 2 bad command line. prepare, grade and report: 0 done, 2 the folder
or the task is not usable (the message says what to do)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from ..agent.cli_options import BASE_URL_HELP, MODEL_HELP
from ..cli.common import AllowUnsandboxedOpt

err = Console(stderr=True)

eval_app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Score a model on planted faults: each task a fresh workspace, graded by ground truth. "
    "With --base-url and --model it runs the eval; its subcommands grade any MCP client's "
    "session on one task and render results as pages.",
)


@eval_app.callback(invoke_without_command=True)
def eval_command(
    ctx: typer.Context,
    base_url: Annotated[Optional[str], typer.Option(help=BASE_URL_HELP)] = None,
    model: Annotated[Optional[str], typer.Option(help=MODEL_HELP)] = None,
    tasks: Annotated[
        Optional[str],
        typer.Option(
            help="Only these tasks (comma-separated ids or families, e.g. kernel.stride)."
        ),
    ] = None,
    runs: Annotated[int, typer.Option(min=1, help="Repeats of every task (the spread).")] = 1,
    budget_calls: Annotated[int, typer.Option(min=1, help="Tool calls per task.")] = 30,
    budget_s: Annotated[float, typer.Option(min=1, help="Wall-clock seconds per task.")] = 900.0,
    max_steps: Annotated[int, typer.Option(min=1, help="Model turns per task.")] = 30,
    seed: Annotated[
        Optional[int],
        typer.Option(
            help="Variant seed (names, sizes, which impl is buggy); default: drawn now, "
            "so the tasks are a held-out set."
        ),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option(
            help="Results folder (results.json, one folder per task run); default "
            "./eval-results/<UTC time>."
        ),
    ] = None,
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the API key (never written anywhere).")
    ] = "OPENAI_API_KEY",
    extra_body: Annotated[
        Optional[str],
        typer.Option(
            help='Provider fields merged into each request, as JSON, e.g. \'{"thinking": {"type": "disabled"}}\'.'
        ),
    ] = None,
    max_completion_tokens: Annotated[
        int, typer.Option(min=1, help="max_tokens of each model turn.")
    ] = 8192,
    allow_unsandboxed: AllowUnsandboxedOpt = False,
) -> None:
    """Score a model on planted faults: each task a fresh workspace, graded by ground truth."""
    if ctx.invoked_subcommand is not None:
        if base_url or model:
            raise _fail(
                "--base-url and --model run the eval itself; "
                f"`infra-agent eval {ctx.invoked_subcommand}` takes its own options, after its name"
            )
        return
    if not base_url or not model:
        raise _fail(
            "give --base-url and --model (the model API to score), or a subcommand: prepare, "
            "grade, report (`infra-agent eval --help`)"
        )
    import anyio

    from .runner import EvalConfig, run_eval

    try:
        body = json.loads(extra_body) if extra_body else {}
    except json.JSONDecodeError as exc:
        raise _fail(f"--extra-body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _fail("--extra-body must be a JSON object")
    if out is None:
        from datetime import datetime, timezone

        out = Path("eval-results") / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    config = EvalConfig(
        base_url=base_url,
        model=model,
        out_dir=out,
        seed=seed,
        tasks=[t.strip() for t in tasks.split(",") if t.strip()] if tasks else None,
        runs=runs,
        budget_calls=budget_calls,
        budget_s=budget_s,
        max_steps=max_steps,
        api_key_env=api_key_env,
        max_completion_tokens=max_completion_tokens,
        extra_body=body,
        allow_unsandboxed=allow_unsandboxed,
    )
    api_key = os.environ.get(api_key_env) or None
    try:
        results = anyio.run(run_eval, config, api_key, _progress)
    except ValueError as exc:  # an unknown task name, a plant this host cannot hold
        raise _fail(str(exc)) from None
    o = results.overall
    err.print(
        f"overall ({o.num_runs} task runs"
        f"{f', {o.void_runs} void: they measured the host' if o.void_runs else ''}, "
        f"seed {results.seed}{' drawn' if results.seed_drawn else ''}): "
        f"correct {o.correct:.0%}, identified {o.identified:.0%}, evidence {o.evidence_ok:.0%}, "
        f"per run {o.correct_per_run}",
        highlight=False,
    )
    sys.stdout.write(f"{out / 'results.json'}\n")
    if all(r.stop_reason == "model_api_error" for r in results.runs):
        raise typer.Exit(1)


def _progress(run) -> None:
    g = run.grade
    err.print(
        f"{run.task_id} run {run.run}: {'correct' if g.correct else 'wrong'} "
        f"({run.tool_calls} calls, {run.wall_s:.0f} s"
        f"{'' if run.tokens is None else f', {run.tokens} tokens'}; {run.stop_reason})"
        + (f" - {'; '.join(g.notes)}" if g.notes else "")
        + (f" [planted: {run.planted}]" if run.planted else "")
        + (
            f" [void, left out of the scores: it measured the host: {run.host_measured}]"
            if run.host_measured
            else ""
        ),
        highlight=False,
        soft_wrap=True,
    )


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


@eval_app.command("prepare")
def prepare_command(
    folder: Annotated[
        Path, typer.Argument(help="A new or empty folder for the session (its workspace).")
    ],
    task: Annotated[
        str, typer.Option("--task", help="The task (an id or family, e.g. kernel.stride).")
    ],
    seed: Annotated[
        Optional[int],
        typer.Option(help="Variant seed; default: drawn now (a variant no test has seen)."),
    ] = None,
) -> None:
    """Set up one task for any MCP client (an IDE's agent): its workspace, the question, and
    the server command that offers submit_diagnosis; then `infra-agent eval grade FOLDER`."""
    from .session import SessionError, prepare_session, serve_command

    try:
        session, workspace = prepare_session(task, seed, folder)
    except SessionError as exc:
        raise _fail(str(exc)) from None
    sys.stdout.write(
        f"task {session.task_id}, seed {session.seed}"
        f"{' (drawn)' if session.seed_drawn else ''}; workspace {workspace}\n\n"
        f"Serve it to your MCP client over stdio (the eval's answer form, submit_diagnosis, "
        f"is offered):\n  {serve_command(workspace)}\n"
        f"(or --http for streamable HTTP; open the workspace folder in the IDE).\n\n"
        f"Ask the client's agent:\n\n{session.question}\n\n"
        f"Then grade its last submission:\n  infra-agent eval grade {folder}\n"
    )


@eval_app.command("grade")
def grade_command(
    folder: Annotated[Path, typer.Argument(help="The folder `infra-agent eval prepare` wrote.")],
    client: Annotated[
        str,
        typer.Option(help="Who answered, for the results and pages, e.g. 'claude-code, sonnet'."),
    ] = "an MCP client",
) -> None:
    """Grade an MCP client's session on a prepared task: its last submit_diagnosis against the
    task's truth and the workspace's ledger (the runner's grading). Writes FOLDER/results.json
    (its path on stdout)."""
    from .session import SessionError, grade_session

    try:
        results, path, num_experiments = grade_session(folder, client)
    except SessionError as exc:
        raise _fail(str(exc)) from None
    if num_experiments == 0:
        err.print(
            "[yellow]warning:[/] the session's ledger is empty: no tool was called on "
            f"{escape(str(folder / 'workspace'))}. Serve that workspace (`infra-agent eval "
            "prepare` printed the command), let the client answer, then grade again.",
            highlight=False,
            soft_wrap=True,
        )
    _progress(results.runs[0])
    sys.stdout.write(f"{path}\n")


@eval_app.command("report")
def report_command(
    results_dir: Annotated[
        Path,
        typer.Argument(help="A results folder (`infra-agent eval --out`, or a graded session)."),
    ],
    out: Annotated[
        Optional[Path], typer.Option(help="Folder for the site; default: RESULTS_DIR/report.")
    ] = None,
) -> None:
    """Write the eval's pages: scores per task, category and overall, and per task run its
    question, path through the tools, cited evidence and grade; each task's ledger as a
    morning report beside them. Opens from disk."""
    from ..report import ReportError
    from ..report.eval_site import write_eval_site

    try:
        written = write_eval_site(results_dir, out or results_dir / "report")
    except (ReportError, ValueError) as exc:
        raise _fail(str(exc)) from None
    sys.stdout.write(
        f"{written.num_runs} task run(s), {written.num_experiments} experiment(s): "
        f"open {written.index.resolve().as_uri()}\n"
    )
