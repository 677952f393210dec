"""A sweep survives its server: killed mid-sweep (SIGKILL, no goodbye), the server restarted,
the sweep called again with resume=<its id> finishes, and every trial was measured exactly once
across the two (counted in the ledger with sqlite3, not from the tool's own answer)."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path

from stdio_server import StdioServer

ARGS = {
    "kernel": "rmsnorm",
    "space": {"BLOCK_N": [64, 128, 256], "num_warps": [1, 2]},
    "shapes": [{"M": 4, "N": 64}],
    "dtype": "float32",
    "target": "sm_90a",
}


def _rows(workspace: Path, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
    with sqlite3.connect(workspace / ".infra-agent" / "ledger.sqlite") as db:
        db.row_factory = sqlite3.Row
        return db.execute(sql, params).fetchall()


def _wait_for_children(workspace: Path, tool: str, count: int, timeout_s: float = 300) -> str:
    """The running sweep's id, once `count` of its `tool` children have ended well."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (workspace / ".infra-agent" / "ledger.sqlite").exists():
            sweeps = _rows(workspace, "SELECT id FROM experiments WHERE tool='sweep_kernel'")
            if sweeps:
                done = _rows(
                    workspace,
                    "SELECT 1 FROM experiments WHERE parent_id=? AND tool=? AND status='ok'",
                    (sweeps[0]["id"], tool),
                )
                if len(done) >= count:
                    return sweeps[0]["id"]
        time.sleep(0.2)
    raise AssertionError(f"no sweep with {count} finished {tool} calls in {timeout_s} s")


def test_a_sweep_killed_with_its_server_resumes_and_measures_each_trial_once(workspace):
    first = StdioServer(workspace)
    try:
        first.initialize()
        first.call(1, "sweep_kernel", ARGS)
        sweep_id = _wait_for_children(workspace, "check_numerics", 2)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
    made_before = _rows(
        workspace, "SELECT id FROM experiments WHERE parent_id=? AND status='ok'", (sweep_id,)
    )
    assert len(made_before) >= 8  # six compiles and two numerics checks at least

    second = StdioServer(workspace)
    try:
        second.initialize()
        second.call(2, "sweep_kernel", {**ARGS, "resume": sweep_id})
        reply = second.reply(2, timeout_s=600)
    finally:
        second.proc.terminate()
        second.proc.wait(60)
    assert "structuredContent" in reply["result"], reply["result"]
    out = reply["result"]["structuredContent"]
    # The restarted server's ledger said what happened to the killed sweep (on its first call).
    [killed] = _rows(workspace, "SELECT status FROM experiments WHERE id=?", (sweep_id,))
    assert killed["status"] == "interrupted"
    assert out["complete"] and out["shapes"][0]["winner"] is not None, out["summary"]
    assert out["trials_reused"] == len(made_before)

    # Exactly once: over both sweeps, each (tool, arguments) ended well in one row only.
    measured = Counter(
        (r["tool"], r["arguments"])
        for r in _rows(
            workspace,
            "SELECT tool, arguments FROM experiments WHERE parent_id IN (?, ?) AND status='ok'",
            (sweep_id, out["experiment_id"]),
        )
    )
    assert measured and max(measured.values()) == 1, measured.most_common(3)
    # Every trial the resumed sweep names is in the ledger, for every config.
    ids = {t for c in out["configs"] for t in c["trials"]}
    found = _rows(
        workspace,
        f"SELECT id, arguments FROM experiments WHERE id IN ({','.join('?' * len(ids))})",
        tuple(ids),
    )
    assert len(found) == len(ids)
    assert {json.loads(r["arguments"]).get("launch_config", {}).get("BLOCK_N") for r in found} == {
        64,
        128,
        256,
    }
