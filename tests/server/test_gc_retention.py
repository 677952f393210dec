"""`infra-agent gc`'s policy for old experiments' files (issue 36, item 6): artifacts deleted by age,
then oldest first down to a total size, never a pinned or recent row's nor what one needs (its
baseline, its sweep, a kept sweep's trials); old job folders whose owner is gone; a pruned row
says so, and so does reading one of its artifacts. What it freed is checked against the files'
sizes measured here before the call."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import call
from typer.testing import CliRunner

from infra_agent.server.cli import app
from infra_agent.server.ledger import Ledger

runner = CliRunner()
DAY = 86_400.0


def _row(ledger: Ledger, state: Path, name: str, days: float, size: int, **arguments) -> str:
    """A closed experiment started `days` ago with one artifact of `size` bytes."""
    parent = arguments.pop("parent_id", None)
    eid = ledger.open(
        tool="serve_benchmark",
        arguments=arguments,
        kernel=None,
        hypothesis=name,
        git_commit=None,
        git_diff_sha256=None,
        device=None,
        device_fingerprint=None,
        parent_id=parent,
    )
    folder = state / "artifacts" / eid
    folder.mkdir(parents=True)
    (folder / "requests.jsonl").write_bytes(b"x" * size)
    ledger.close_ok(eid, {"metrics": {}}, [f"artifact://{eid}/requests.jsonl"])
    with sqlite3.connect(ledger.path) as db:  # its age
        db.execute(
            "UPDATE experiments SET started_at=? WHERE id=?", (time.time() - days * DAY, eid)
        )
    return eid


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _job(state: Path, name: str, days: float, owner: int | None = None) -> Path:
    folder = state / "jobs" / name
    folder.mkdir(parents=True)
    (folder / "out.json").write_bytes(b"y" * 1000)
    if owner is not None:
        (folder / "owner.pid").write_text(str(owner))
    old = time.time() - days * DAY
    for p in [*folder.iterdir(), folder]:
        os.utime(p, (old, old))
    return folder


@pytest.mark.anyio
async def test_gc_prunes_old_artifacts_by_age_and_size_and_keeps_what_kept_rows_need(workspace):
    state = workspace / ".infra-agent"
    ledger = Ledger(state / "ledger.sqlite")
    old = _row(ledger, state, "old", 40, 5000)
    pinned = _row(ledger, state, "pinned", 45, 7000)
    ledger.pin(pinned)
    base = _row(ledger, state, "an old baseline of a recent run", 50, 3000)
    sweep = _row(ledger, state, "an old sweep a pinned trial belongs to", 41, 1000)
    trial = _row(
        ledger, state, "its other trial: a kept sweep's report reads it", 41, 2000, parent_id=sweep
    )
    kept_trial = _row(ledger, state, "a pinned trial", 41, 1500, parent_id=sweep)
    ledger.pin(kept_trial)
    mid_old = _row(ledger, state, "5 days old", 5, 400_000)
    mid_new = _row(ledger, state, "4 days old", 4, 400_000)
    recent = _row(ledger, state, "recent", 0.1, 600_000, baseline=base)
    ledger.close()
    sizes = {eid: _folder_bytes(state / "artifacts" / eid) for eid in (old, mid_old)}
    dead_job = _job(state, "job-old", 3)
    live_engine = _job(state, "engine-serve-live", 3, owner=os.getpid())
    fresh_job = _job(state, "job-fresh", 0)

    # cap 1.2 MB: the recent 600 kB and both 400 kB rows pass it; the older 400 kB one goes
    result = runner.invoke(
        app,
        ["gc", "-w", str(workspace), "--max-age-days", "30", "--max-gb", str(1.2e6 / 2**30)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["pruned_ids"] == [old, mid_old], report  # oldest first
    assert report["artifact_bytes_freed"] == sum(sizes.values()), report
    assert report["job_folders_removed"] == 1 and report["job_bytes_freed"] == 1000, report
    assert (
        report["total_bytes_freed"] == report["artifact_bytes_freed"] + 1000 + report["bytes_freed"]
    )
    for eid in (pinned, base, sweep, trial, kept_trial, mid_new, recent):
        assert (state / "artifacts" / eid / "requests.jsonl").is_file(), eid
    for eid in (old, mid_old):
        assert not (state / "artifacts" / eid).exists(), eid
    assert not dead_job.exists() and live_engine.is_dir() and fresh_job.is_dir()

    again = json.loads(runner.invoke(app, ["gc", "-w", str(workspace)]).stdout)
    assert (
        again["pruned_ids"] == [] and again["artifact_bytes_freed"] == 0
    )  # nothing more by default


@pytest.mark.anyio
async def test_a_pruned_row_and_its_artifacts_say_so(workspace):
    state = workspace / ".infra-agent"
    ledger = Ledger(state / "ledger.sqlite")
    old = _row(ledger, state, "old", 40, 100)
    ledger.close()
    assert runner.invoke(app, ["gc", "-w", str(workspace)]).exit_code == 0

    from mcp import Client

    from infra_agent.server.app import build_server

    server = build_server(workspace)
    async with Client(server) as client:
        rows = (await call(client, "list_experiments", limit=5))["experiments"]
        (row,) = [r for r in rows if r["id"] == old]
        assert row["artifacts_pruned_at"] is not None, row
        with pytest.raises(Exception) as err:
            await client.read_resource(f"artifact://{old}/requests.jsonl")
        assert "deleted by `infra-agent gc`" in str(err.value), err.value
    await server.aclose()
