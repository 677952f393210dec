"""`infra-agent eval`: the typer command (registered in server/cli/__init__.py). Options -> EvalConfig,
the key from the environment, the run, a table on stderr, the results file's path on stdout.

Exit codes: 0 every task run was graded (whatever the scores), 1 the model API failed for
every task, 2 bad command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ..agent.cli_options import BaseUrlOpt, ModelOpt
from ..cli.common import AllowUnsandboxedOpt

err = Console(stderr=True)


def eval_command(
    base_url: BaseUrlOpt,
    model: ModelOpt,
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
    except ValueError as exc:  # an unknown task name
        raise _fail(str(exc)) from None
    o = results.overall
    err.print(
        f"overall ({o.num_runs} task runs, seed {results.seed}{' drawn' if results.seed_drawn else ''}): "
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
        f"({run.tool_calls} calls, {run.wall_s:.0f} s, {run.tokens} tokens; {run.stop_reason})"
        + (f" - {'; '.join(g.notes)}" if g.notes else ""),
        highlight=False,
        soft_wrap=True,
    )


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(2)
