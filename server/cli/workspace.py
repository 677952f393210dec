"""Commands that change what a workspace keeps: `lock` (pin a kernel's reference),
`gc` (delete what the retention policy lets go) and `pin` (keep an experiment from gc)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from .common import WorkspaceOpt, build, fail, print_json


def lock(
    kernel: Annotated[str, typer.Argument(help="Kernel whose reference and tolerances to pin.")],
    workspace: WorkspaceOpt = None,
) -> None:
    """Pin a kernel's reference (hashes) so later numerics checks detect edits to it."""
    try:
        from ...tools.check_numerics.lock import lock_kernel
    except ImportError as exc:
        raise fail(f"kernel locking is not available in this install ({exc})") from None
    from ...kernels.workspace import WorkspaceError, load_workspace
    from ...tools.base import AgentError

    try:
        ws = load_workspace(workspace)
        result = lock_kernel(ws, kernel)
    except (WorkspaceError, AgentError) as exc:
        raise fail(str(exc)) from None
    print_json(result)


def gc(
    workspace: WorkspaceOpt = None,
    max_age_days: Annotated[
        float, typer.Option(help="Delete the artifacts of experiments older than this, days.")
    ] = 30.0,
    max_gb: Annotated[
        float,
        typer.Option(
            help="Then delete the oldest experiments' artifacts until they total this, GB."
        ),
    ] = 20.0,
    keep_days: Annotated[
        float,
        typer.Option(help="Never touch experiments (and job folders) younger than this, days."),
    ] = 1.0,
) -> None:
    """Delete stored code (blobs) that no experiment in the ledger references, rebuilt snapshot
    folders, and old experiments' artifacts and job folders (never a pinned or recent experiment's,
    nor what one needs: docs/workspaces.md, 'What gc keeps'); prints what it freed."""
    import time

    from ...kernels.snapshots import collect_garbage
    from ..retention import Policy, collect

    server = build(workspace)
    ledger = server.state.ledger
    running = ledger.running_ids()
    if running:  # their snapshots are not in the ledger until they close
        raise fail(
            f"{len(running)} call(s) still running ({', '.join(running[:5])}); run gc when the server "
            "is idle"
        )
    state_dir = server.state.workspace.state_dir
    now = time.time()
    policy = Policy(max_age_days=max_age_days, max_bytes=int(max_gb * 2**30), keep_days=keep_days)
    files = collect(state_dir, ledger, policy, now)
    report = collect_garbage(state_dir, ledger.code_shas(), now)
    print_json(
        {
            "state_dir": str(state_dir),
            **dataclasses.asdict(report),  # bytes_freed: the code blobs'
            **dataclasses.asdict(files),
            "total_bytes_freed": report.bytes_freed
            + files.artifact_bytes_freed
            + files.job_bytes_freed,
            "policy": dataclasses.asdict(policy),
        }
    )


def pin(
    experiment_id: Annotated[str, typer.Argument(help="The experiment whose files gc keeps.")],
    workspace: WorkspaceOpt = None,
    off: Annotated[bool, typer.Option("--off", help="Unpin: gc's policy applies again.")] = False,
) -> None:
    """Keep an experiment's artifacts (and what it needs: its baseline, its sweep) from gc."""
    server = build(workspace)
    if not server.state.ledger.pin(experiment_id, not off):
        raise fail(f"no experiment {experiment_id!r} in the ledger (list_experiments shows them)")
    print_json({"experiment_id": experiment_id, "pinned": not off})
