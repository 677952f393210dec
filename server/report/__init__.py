"""The morning report: what the agent did overnight, as a static site over the ledger
(`infra-agent report`) and live at /ui (live.py). rows.py reads one ledger row into a typed
experiment (numbers.py picks its key number and claims); model.py links them into chains
and a summary; pages.py adds one experiment's diffs and artifacts; render.py writes the
pages from templates/."""

from __future__ import annotations

from pathlib import Path

from .model import Filters, load_report
from .render import ReportError, Written, write_site

__all__ = ["Filters", "ReportError", "Written", "build_report", "report_for_workspace"]

DEFAULT_FOLDER = "report"  # under the workspace's state folder


def build_report(state_dir: Path, site: Path, filters: Filters) -> Written:
    """Read the ledger under `state_dir` and write the site into `site` (replacing an earlier
    report there)."""
    return write_site(load_report(state_dir, filters), site)


def report_for_workspace(
    workspace: Path | None,
    *,
    since: str | None,
    until: str | None,
    kernel: str | None,
    site: Path | None,
    sweep: str | None = None,
) -> Written:
    """`infra-agent report`: the workspace's ledger, the window as the command line gives it
    (ISO times or ages such as 12h), `sweep` an experiment id (that sweep and its
    trials), into `site` or <state>/report."""
    from ...kernels.workspace import WorkspaceError, load_workspace
    from ...tools.base import AgentError
    from ...tools.list_experiments import parse_since

    try:
        state_dir = load_workspace(workspace).state_dir
        filters = Filters(
            since=parse_since(since), until=parse_since(until), kernel=kernel, sweep=sweep
        )
    except (WorkspaceError, AgentError) as exc:
        raise ReportError(str(exc)) from None
    return build_report(state_dir, site or state_dir / DEFAULT_FOLDER, filters)
