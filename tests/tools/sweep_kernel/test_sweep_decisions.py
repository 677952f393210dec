"""How sweep_kernel decides (issue 35): a winner is a config that was timed and compared, an
unlaunchable config never races, a resumed sweep times nothing twice, the wall budget ends the
calls still running. Each answer is checked against a second source: the ledger rows of the
sweep's children read with sqlite3 (what compile_kernel and microbench themselves answered),
plain-Python arithmetic on the compiler's numbers, and the report's page of the sweep. (The
winner against microbench's own interleaved A/B made outside the sweep:
test_sweep_kernel.py::test_planted_slow_and_wrong_configs_never_win.)"""

import json

import pytest
from conftest import call
from test_sweep_kernel import PLANTED, _children
from typer.testing import CliRunner

from infra_agent.server.cli import app

pytestmark = pytest.mark.anyio

# PLANTED with one more knob: SLEEP_S sleeps that long in every call (a config far too slow to
# time within microbench's cap, and a numerics check that outlasts a wall budget).
SLEEPY = PLANTED.replace(
    "def rmsnorm(x, weight, BLOCK_N=None, SLOW=0, OFF_BY_ONE=0):",
    "def rmsnorm(x, weight, BLOCK_N=None, SLOW=0, OFF_BY_ONE=0, SLEEP_S=0):\n"
    "    import time\n"
    "    time.sleep(SLEEP_S)",
)
SHAPE = {"M": 4, "N": 64}
# PLANTED with a knob that makes the host "get busier" within every job, at the same pace in
# each: with GROW=1 a call sleeps 10 ms x e^(t / 50 ms), t the time since the first call in its
# job, at most 3 s. A job of a fraction of a second fits a few calls and measures them fast; a
# job given the budget that pace asks for (seconds) fits only a few more, at 3 s each: microbench
# refuses the first call of a pair, and refuses the retry at its own estimate again.
GROWING = PLANTED.replace(
    "def rmsnorm(x, weight, BLOCK_N=None, SLOW=0, OFF_BY_ONE=0):",
    "_FIRST_CALL = []\n\n\n"
    "def rmsnorm(x, weight, BLOCK_N=None, SLOW=0, OFF_BY_ONE=0, GROW=0):\n"
    "    import math\n"
    "    import time\n"
    "    _FIRST_CALL[:] = _FIRST_CALL or [time.monotonic()]\n"
    "    if GROW:\n"
    "        t = time.monotonic() - _FIRST_CALL[0]\n"
    "        time.sleep(min(0.01 * math.exp(min(t / 0.05, 50.0)), 3.0))",
)


async def test_a_config_the_target_cannot_launch_is_dropped_at_compile(zoo_client, zoo_workspace):
    """num_warps=64 is 2048 threads per block, over sm_90a's 1024: compile_kernel (ahead of
    time, on this CPU host) says it cannot launch, and the sweep drops it there."""
    out = await call(
        zoo_client,
        "sweep_kernel",
        kernel="vector_add",
        space={"num_warps": [4, 64]},
        shapes=[{"N": 1000}],
        dtype="float32",
        target="sm_90a",
        round_ms=100,
    )
    rows = {r["config"]["num_warps"]: r for r in out["configs"]}
    assert rows[64]["stage"] == "compile", rows[64]
    assert "cannot launch on sm_90a" in rows[64]["dropped"], rows[64]
    assert rows[4]["dropped"] is None and out["compiled"] == 1
    assert out["shapes"][0]["winner"] == {"num_warps": 4} and out["best"] == {"num_warps": 4}
    # the compiler's own numbers: 32 threads a warp, over the target's 1024 threads per block
    for child in _children(zoo_workspace, out["experiment_id"]):
        if child["tool"] == "compile_kernel" and child["status"] == "ok":
            warps = child["arguments"]["launch_config"]["num_warps"]
            kernel = child["result"]["kernels"][0]
            assert kernel["threads_per_block"] == 32 * warps
            assert (kernel["occupancy"]["blocks_per_sm"] == 0) == (32 * warps > 1024)
    assert not any(
        c["tool"] in ("check_numerics", "microbench")
        and c["arguments"]["launch_config"] == {"num_warps": 64}
        for c in _children(zoo_workspace, out["experiment_id"])
    )


async def test_a_pair_that_cannot_be_timed_leaves_the_shape_undecided(zoo_client, zoo_workspace):
    """The leader sleeps 8 s a call: microbench refuses the pair's first budget, and at the call
    time its refusal reports, even microbench's minimum of timed calls is over its 60 s cap, so
    the pair is never timed (at 3 s a call it fits: the race times it at the cap). Neither config
    was timed, so neither wins: the shape is undecided with why, and the config the refusal
    left out is not dropped (it did nothing wrong)."""
    configs = [{"SLEEP_S": 8}, {"SLEEP_S": 0}]
    out = await call(
        zoo_client,
        "sweep_kernel",
        kernel="rmsnorm",
        source=SLEEPY,
        entry="rmsnorm",
        configs=configs,
        shapes=[SHAPE],
        dtype="float32",
        target="sm_90a",
        round_ms=50,
    )
    [shape] = out["shapes"]
    assert shape["winner"] is None and shape["winner_median_ms"] is None, shape
    assert shape["decided"] is False
    why = shape["undecided_because"]
    assert "SLEEP_S=0 was never compared with SLEEP_S=8" in why, why
    assert "over microbench's cap" in why, why
    assert "undecided" in out["summary"]
    rows = {r["config"]["SLEEP_S"]: r for r in out["configs"]}
    assert rows[0]["dropped"] is None and rows[0]["stage"] == "race"
    # microbench's own answer: every pair the sweep asked for was refused, none timed
    benches = [
        c for c in _children(zoo_workspace, out["experiment_id"]) if c["tool"] == "microbench"
    ]
    assert benches and all(c["status"] == "error" for c in benches)
    assert all("raise budget_ms to about" in c["error"] for c in benches)
    # a winner is only ever a config timed on its shape
    for w in out["shapes"]:
        assert (w["winner"] is None) or (w["winner_median_ms"] is not None)


async def test_a_pair_refused_again_at_its_own_estimate_crowns_no_one(zoo_client, zoo_workspace):
    """Issue 35 item 11: a race pair whose retry, at the budget microbench's own refusal
    estimated, is refused again (the host got busier between the two calls: GROWING) was never
    compared. The shape is undecided with why, and no config wins it: neither the leader left
    alone (never timed) nor the challenger whose pair was refused."""
    out = await call(
        zoo_client,
        "sweep_kernel",
        kernel="rmsnorm",
        source=GROWING,
        entry="rmsnorm",
        configs=[{"GROW": 1}, {"GROW": 0}],
        shapes=[SHAPE],
        dtype="float32",
        target="sm_90a",
        round_ms=100,
    )
    benches = [
        c for c in _children(zoo_workspace, out["experiment_id"]) if c["tool"] == "microbench"
    ]
    # microbench's own answers: the pair refused twice, the retry at the first refusal's estimate
    assert [c["status"] for c in benches] == ["error", "error"], [
        (c["status"], c["arguments"]["budget_ms"], c["error"]) for c in benches
    ]
    first, retry = benches
    estimate = float(first["error"].split("raise budget_ms to about ")[1].split()[0])
    assert retry["arguments"]["budget_ms"] == max(estimate, 2 * 100)
    assert "raise budget_ms to about" in retry["error"]
    [shape] = out["shapes"]
    assert shape["winner"] is None and shape["winner_median_ms"] is None, shape
    assert shape["decided"] is False and out["best"] is None, out["summary"]
    why = shape["undecided_because"]
    assert "GROW=0 was never compared with GROW=1" in why, why
    assert "refused again at the budget the first refusal estimated" in why, why
    assert "undecided" in out["summary"]
    # the refused challenger did nothing wrong: not dropped
    rows = {r["config"]["GROW"]: r for r in out["configs"]}
    assert rows[0]["dropped"] is None and rows[1]["dropped"] is None, rows


async def test_a_resumed_sweep_times_nothing_it_recorded(zoo_client, zoo_workspace, tmp_path):
    """round_ms=1 is too short for any pair: microbench refuses it with an estimate, and the
    pair is timed at that estimate. Resumed, the sweep replays the refusal from the ledger, so
    its retry is the recorded call: no microbench call is made again (counted in the ledger)."""
    args = {
        "kernel": "rmsnorm",
        "space": {"num_warps": [1, 2]},
        "shapes": [SHAPE],
        "dtype": "float32",
        "target": "sm_90a",
        "round_ms": 1,
    }
    first = await call(zoo_client, "sweep_kernel", **args)
    made = _children(zoo_workspace, first["experiment_id"])
    refused = [c for c in made if c["tool"] == "microbench" and c["status"] == "error"]
    timed = [c for c in made if c["tool"] == "microbench" and c["status"] == "ok"]
    assert refused and timed, [(c["tool"], c["status"], c["error"]) for c in made]
    again = await call(zoo_client, "sweep_kernel", **args, resume=first["experiment_id"])
    remade = _children(zoo_workspace, again["experiment_id"])
    assert [c for c in remade if c["tool"] == "microbench"] == [], [
        (c["arguments"]["budget_ms"], c["status"]) for c in remade
    ]
    assert again["trials_made"] == len(remade) == 0
    assert again["shapes"][0]["winner"] == first["shapes"][0]["winner"]
    # no call ended well twice over the two sweeps
    ok = [
        json.dumps([c["tool"], c["arguments"]], sort_keys=True)
        for c in [*made, *remade]
        if c["status"] == "ok"
    ]
    assert len(ok) == len(set(ok))

    # The report's sweep page shows the refused budget probes as such, not as red errors.
    site = tmp_path / "site"
    written = CliRunner().invoke(app, ["report", "-w", str(zoo_workspace), "--out", str(site)])
    assert written.exit_code == 0, written.output
    page = (site / "experiments" / f"{first['experiment_id']}.html").read_text()
    trials = page.split('id="sweep-trials"')[1].split("</ul>")[0]
    for probe in refused:
        line = trials.split(f"{probe['id']}</a>")[1].split("</li>")[0]
        assert 'class="refused muted"' in line and 'class="error"' not in line, line


async def test_the_wall_budget_ends_the_calls_still_running(zoo_client, zoo_workspace):
    """A config whose every call sleeps 300 s: its compile (which calls it) outlasts the 15 s
    budget. The sweep ends it (its ledger row an error, not a result) and answers, partial,
    saying so."""
    out = await call(
        zoo_client,
        "sweep_kernel",
        kernel="rmsnorm",
        source=SLEEPY,
        entry="rmsnorm",
        configs=[{"SLEEP_S": 300}, {"SLEEP_S": 0}],
        shapes=[SHAPE],
        dtype="float32",
        target="sm_90a",
        budget={"wall_s": 15},
    )
    assert not out["complete"] and "were ended" in out["stopped_because"], out["stopped_because"]
    assert "Partial" in out["summary"]
    children = _children(zoo_workspace, out["experiment_id"])
    assert all(c["status"] in ("ok", "error") for c in children)  # none left running
    # the ledger names the sweep's budget as what ended them, never the user
    ended = [
        c
        for c in children
        if c["status"] == "error"
        and "ended by sweep_kernel's wall budget (budget.wall_s=15 s" in (c["error"] or "")
    ]
    assert ended, [(c["tool"], c["status"], c["error"]) for c in children]
    assert not any("cancelled by the client" in (c["error"] or "") for c in children)
    sleeper = [c for c in children if c["arguments"]["launch_config"] == {"SLEEP_S": 300}]
    assert not any(c["tool"] == "check_numerics" and c["status"] == "ok" for c in sleeper)
    assert out["shapes"][0]["decided"] is False
