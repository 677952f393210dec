"""Commands that read the workspace's ledger: `experiments` (a table) and `report` (a site)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import render
from .common import JsonOpt, WorkspaceOpt, build, fail, out, print_json


def experiments(
    workspace: WorkspaceOpt = None,
    tool: Annotated[Optional[str], typer.Option(help="Only this tool.")] = None,
    kernel: Annotated[Optional[str], typer.Option(help="Only this kernel.")] = None,
    since: Annotated[Optional[str], typer.Option(help="ISO time or an age such as 2h.")] = None,
    run: Annotated[
        Optional[str], typer.Option(help="Only calls made by this agent run (run id).")
    ] = None,
    limit: Annotated[int, typer.Option(help="Most rows.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """List recent experiments from the workspace's ledger (read-only)."""
    from ...tools.base import AgentError
    from ...tools.list_experiments import parse_since, summarise

    server = build(workspace)
    try:
        rows = server.state.ledger.query(
            tool=tool, kernel=kernel, since=parse_since(since), run_id=run, limit=limit
        )
    except AgentError as exc:
        raise fail(str(exc)) from None
    summaries = [summarise(r).model_dump() for r in rows]
    if as_json:
        print_json(summaries)
    else:
        render.experiments_table(out, summaries)


def report(
    workspace: WorkspaceOpt = None,
    since: Annotated[Optional[str], typer.Option(help="ISO time or an age such as 12h.")] = None,
    until: Annotated[Optional[str], typer.Option(help="ISO time or an age such as 1h.")] = None,
    kernel: Annotated[Optional[str], typer.Option(help="Only this kernel.")] = None,
    sweep: Annotated[
        Optional[str],
        typer.Option(help="Only this sweep (its experiment id, e.g. e00012-ab3f) and its trials."),
    ] = None,
    out_dir: Annotated[
        Optional[Path],
        typer.Option("--out", help="Folder for the site; default: <workspace state>/report."),
    ] = None,
) -> None:
    """Write the morning report: a static site over the ledger (summary, timeline, one page per
    experiment) that opens from disk."""
    from ..report import ReportError, report_for_workspace

    try:
        written = report_for_workspace(
            workspace, since=since, until=until, kernel=kernel, site=out_dir, sweep=sweep
        )
    except ReportError as exc:
        raise fail(str(exc)) from None
    out.print(
        f"{written.num_experiments} experiment(s), {written.num_index_pages} index page(s): "
        f"open {written.index.resolve().as_uri()}",
        highlight=False,
        soft_wrap=True,
    )
