"""compare_experiments of two microbench calls says first when they ran under different
conditions, and leads with the in-call A/B. Two real calls: a times FAST alone, b times SLOW
against a (baseline=a's id: a's code rerun from its snapshot, interleaved). Then b's row is
altered the way a host that drifted between the calls makes it: every time of both of b's arms
x1.83, its in-call ratio and CI unchanged (both arms slowed alike). Witnesses: the drift factor
is computed here from the ledger read with sqlite3; the in-call direction is checked against
an interleaved time.perf_counter A/B of the same two functions run here."""

from __future__ import annotations

import json
import math
import sqlite3
import statistics
import time
from pathlib import Path

import pytest
from conftest import call, record_on_node

pytestmark = pytest.mark.anyio

FAST = "def vector_add(x, y):\n    return x + y\n"
# the same answer, thirty additions later: clearly slower on any host
SLOW = "def vector_add(x, y):\n    out = x + y\n    for _ in range(30):\n        out = x + y\n    return out\n"
SHAPE = {"N": 100_000}
DRIFT = 1.83  # the factor the host drifted by (70.6 ms / 38.6 ms)


def beyond_noise(*arms: dict) -> float:
    """DRIFT, or more where this loaded host's medians are noisier than that (3 SEs)."""
    noise = 3 * math.hypot(*(arm["median_rel_se_pct"] for arm in arms))
    return max(DRIFT, 1.5 * (1 + noise / 100))


TIME_FIELDS = ("median_ms", "mean_ms", "p10_ms", "p90_ms", "iqr_ms")


def ledger_row(workspace: Path, experiment_id: str) -> dict:
    with sqlite3.connect(workspace / ".infra-agent" / "ledger.sqlite") as db:
        (text,) = db.execute(
            "SELECT result FROM experiments WHERE id=?", (experiment_id,)
        ).fetchone()
    return json.loads(text)


def write_result(workspace: Path, experiment_id: str, result: dict) -> None:
    with sqlite3.connect(workspace / ".infra-agent" / "ledger.sqlite") as db:
        db.execute(
            "UPDATE experiments SET result=? WHERE id=?", (json.dumps(result), experiment_id)
        )


def drifted(result: dict, factor: float) -> dict:
    """Both interleaved arms slowed alike: every time scaled, the in-call ratio unchanged."""
    out = json.loads(json.dumps(result))
    for shape in out["shapes"]:
        for arm in ("candidate", "baseline"):
            for name in TIME_FIELDS:
                shape[arm][name] *= factor
    return out


def perf_counter_ratio() -> float:
    """SLOW / FAST, interleaved in this process: the witness of the in-call direction."""
    import torch

    scope: dict = {}
    exec(FAST.replace("vector_add", "fast"), scope)
    exec(SLOW.replace("vector_add", "slow"), scope)
    x, y = torch.randn(SHAPE["N"]), torch.randn(SHAPE["N"])
    times: dict[str, list[float]] = {"fast": [], "slow": []}
    for _ in range(40):
        for name in ("fast", "slow"):
            start = time.perf_counter()
            scope[name](x, y)
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["slow"]) / statistics.median(times["fast"])


async def test_a_drifted_host_is_said_first_and_the_in_call_ab_leads(client, workspace):
    common = dict(kernel="vector_add", entry="vector_add", shapes=[SHAPE], budget_ms=1500)
    a = await call(client, "microbench", source=FAST, **common)
    b = await call(client, "microbench", source=SLOW, baseline=a["experiment_id"], **common)
    ida, idb = a["experiment_id"], b["experiment_id"]
    in_call = ledger_row(workspace, idb)["shapes"][0]
    assert in_call["verdict"] == "slower" and in_call["ratio"] > 1
    assert perf_counter_ratio() > 1  # the witness agrees on the direction

    # b's host ran DRIFT x slower than a's (whatever this host did between the two calls),
    # or, quiet, as fast: the rerun of a's code timed as a timed it
    a_arm = ledger_row(workspace, ida)["shapes"][0]["candidate"]
    a_median, rerun = a_arm["median_ms"], in_call["baseline"]["median_ms"]
    original = ledger_row(workspace, idb)
    quiet = drifted(original, a_median / rerun)
    factor = beyond_noise(a_arm, in_call["baseline"])
    write_result(workspace, idb, drifted(original, factor * a_median / rerun))

    cmp = await call(client, "compare_experiments", a=ida, b=idb)
    before = ledger_row(workspace, ida)["shapes"][0]["candidate"]["median_ms"]
    after = ledger_row(workspace, idb)["shapes"][0]["baseline"]["median_ms"]
    first = cmp["conditions"][0]
    assert first["code"] == "same_code_timed_differently", cmp["conditions"]
    assert (first["arm_a"], first["arm_b"]) == ("candidate", "baseline")
    assert first["drift_ratio"] == pytest.approx(after / before, rel=1e-5)
    assert first["median_ms_a"] == pytest.approx(before) and first["median_ms_b"] == pytest.approx(
        after
    )
    # the in-call A/B is b's own ratio and CI, unchanged by the drift
    ab = cmp["in_call"][0]
    assert ab["experiment_id"] == idb
    assert (ab["ratio"], ab["ci_low"], ab["ci_high"]) == (
        in_call["ratio"],
        in_call["ci_low"],
        in_call["ci_high"],
    )
    # said first: conditions, then the in-call evidence, then verdicts and the cross-call moves
    summary = cmp["summary"]
    assert summary.startswith("conditions differ: the same code"), summary
    assert (
        summary.index("in-call A/B") < summary.index("verdict") < summary.index("moved (cross-call")
    )
    assert f"x{after / before:.3g}" in summary

    # no drift: said too, once, as comparable
    write_result(workspace, idb, quiet)
    alike = await call(client, "compare_experiments", a=ida, b=idb)
    assert [c["code"] for c in alike["conditions"]] == ["same_code_timed_alike"]
    assert alike["conditions"][0]["drift_ratio"] == pytest.approx(1.0)
    assert alike["summary"].startswith("conditions alike:")
    assert "moved (cross-call" not in alike["summary"]

    # another device: the first condition
    record_on_node(workspace, idb)
    moved = await call(client, "compare_experiments", a=ida, b=idb)
    assert moved["conditions"][0]["code"] == "device_differs"
    assert moved["summary"].startswith("conditions differ: a ran on device")


async def test_the_same_code_in_both_candidates_is_compared_too(client, workspace):
    """No baseline anywhere: the same inline code timed in two calls is itself the A/A."""
    common = dict(kernel="vector_add", entry="vector_add", shapes=[SHAPE], budget_ms=800)
    a = await call(client, "microbench", source=FAST, **common)
    b = await call(client, "microbench", source=FAST, **common)
    arms = [ledger_row(workspace, o["experiment_id"])["shapes"][0]["candidate"] for o in (a, b)]
    write_result(
        workspace, b["experiment_id"], _scaled_candidate(workspace, a, b, beyond_noise(*arms))
    )
    cmp = await call(client, "compare_experiments", a=a["experiment_id"], b=b["experiment_id"])
    assert cmp["code"]["same_code"] is True
    assert cmp["conditions"][0]["code"] == "same_code_timed_differently"
    assert cmp["conditions"][0]["arm_a"] == cmp["conditions"][0]["arm_b"] == "candidate"
    assert cmp["in_call"] == []  # neither timed an A/B


def _scaled_candidate(workspace: Path, a: dict, b: dict, factor: float) -> dict:
    """b's candidate timed `factor` x a's, whatever this host did between the calls."""
    a_median = ledger_row(workspace, a["experiment_id"])["shapes"][0]["candidate"]["median_ms"]
    result = ledger_row(workspace, b["experiment_id"])
    arm = result["shapes"][0]["candidate"]
    scale = factor * a_median / arm["median_ms"]
    for name in TIME_FIELDS:
        arm[name] *= scale
    return result
