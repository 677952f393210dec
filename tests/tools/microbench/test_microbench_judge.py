"""microbench's judge on hand-built measurements, without a sandbox: it reads only the
`ShapeRun`s it is given (pure), and the timing job's answer is parsed once at the boundary."""

import random

import pytest

from infra_agent.kernels.workspace import load_workspace
from infra_agent.tools.base import AgentError
from infra_agent.tools.microbench.jobs import ArmTimes, SpotCall, TimingRun, _parsed
from infra_agent.tools.microbench.judge import judge
from infra_agent.tools.microbench.measure import ShapeRun, SpotCheck
from infra_agent.tools.microbench.plan import Bench, Code, spot_check_calls
from infra_agent.tools.microbench.schema import Input

ARMS = (
    Code(name="candidate", label="source", entry="add"),
    Code(name="baseline", label="reference", entry="ref", is_reference=True),
)
CEILINGS = {"copy_gbps": 10.0, "matmul_tflops": {"float32": 0.1}, "device": {"device": "cpu"}}


def _bench(arms=ARMS) -> Bench:
    inp = Input(kernel="vector_add", baseline="reference")
    return Bench(
        kernel=load_workspace().kernel("vector_add"),
        inp=inp,
        dtype="float32",
        shapes=({"N": 4096}, {"N": 65536}),
        arms=arms,
    )


def _timing(candidate_ns: float, baseline_ns: float, seed: int, threads: int = 1) -> TimingRun:
    rng = random.Random(seed)
    samples = {
        name: tuple(int(t * rng.uniform(0.98, 1.02)) for _ in range(200))
        for name, t in (("candidate", candidate_ns), ("baseline", baseline_ns))
    }
    return TimingRun(
        arms={k: ArmTimes(v, 10) for k, v in samples.items()},
        warmup_calls=8,
        warmup_stable=True,
        stop_reason="target_se",
        num_input_sets=4,
        elapsed_ms=90.0,
        spot_calls=(),
        device={"device": "cpu", "name": "test cpu"},
        clocks={"cpu_mhz_max": 3000.0 + seed},
        timer="perf_counter_ns",
        threads=threads,
        compiles=seed,
        out_dir=None,
        node=None,
    )


PASSED = SpotCheck("passed", "calls 3, 7 checked")


def _runs(candidate_check: SpotCheck = PASSED) -> list[ShapeRun]:
    checks = {
        "candidate": candidate_check,
        "baseline": SpotCheck("skipped", "the reference itself"),
    }
    return [
        ShapeRun(
            shape={"N": n},
            index=i,
            timing=_timing(ns, 2 * ns, seed=i + 1),
            seeds=(11, 12),
            spot_checks=checks,
        )
        for i, (n, ns) in enumerate(((4096, 20_000), (65536, 200_000)))
    ]


def test_judge_is_pure_and_reads_only_its_runs():
    bench, runs = _bench(), _runs()
    first = judge(bench, runs, CEILINGS, "measured now", ["host note"])
    again = judge(bench, runs, CEILINGS, "measured now", ["host note"])
    assert first == again
    assert first.verdict == "faster" and [r.verdict for r in first.shapes] == ["faster", "faster"]
    assert first.shapes[0].ratio == pytest.approx(0.5, rel=0.05)
    assert first.triton_compiles == 1 + 2  # every shape's jobs, counted by the sandbox
    assert (
        first.clocks == {"cpu_mhz_max": 3002.0} and first.device["name"] == "test cpu"
    )  # the last shape's
    assert first.disturbances[0] == "host note" and "minor page faults" in first.disturbances[1]
    assert first.ceilings["note"] == "measured now" and "device" not in first.ceilings
    assert first.shapes[1].candidate.spot_check_detail == "calls 3, 7 checked"
    assert first.summary.startswith("vector_add/source vs reference, float32, 2 shape(s)")


def test_a_failed_spot_check_voids_the_timing():
    out = judge(
        _bench(), _runs(SpotCheck("failed", "call 3 output 0: rel L2 1")), None, "no ceilings", []
    )
    assert out.verdict == "invalid" and {r.verdict for r in out.shapes} == {"invalid"}
    assert out.shapes[0].candidate.pct_of_roofline is None  # no ceilings, no roofline
    assert "spot-check failed" in out.summary


def _answer(**changes) -> dict:
    raw = {
        "arms": {
            "candidate": {"samples_ns": [5, 6, 7, 8, 9], "minor_faults": 2},
            "baseline": {"samples_ns": [5, 6, 7, 8, 9], "minor_faults": "many"},
        },
        "warmup": {"calls_per_arm": "3", "stable": 1},
        "stop_reason": "budget",
        "num_input_sets": 2,
        "elapsed_ms": 4.5,
        "device": {"device": "cpu"},
        "timer": "perf_counter_ns",
        "threads": 2,
        "spot_checks": [
            {"arm": "candidate", "input_set": "1", "iteration": 4, "file": "a.pt"},
            "junk",
            {"arm": "baseline", "input_set": 0, "iteration": 2, "file": "b.pt"},
            {"arm": "candidate", "input_set": 99, "iteration": 5, "file": "c.pt"},
        ],
    }
    return {**raw, **changes}


def test_the_timing_answer_is_parsed_once_at_the_boundary():
    run = _parsed(_answer(), list(ARMS), compiles=3, out_dir=None, node=None)
    assert run.arms["candidate"] == ArmTimes((5, 6, 7, 8, 9), 2)
    assert run.arms["baseline"].minor_faults is None  # not a count: not reported
    assert (run.warmup_calls, run.warmup_stable, run.clocks, run.compiles) == (3, True, {}, 3)
    assert len(run.spot_calls) == 3  # "junk" is not a call
    wanted, sets = spot_check_calls(
        run.spot_calls, ARMS
    )  # the reference arm and set 99 are not checked
    assert wanted == [SpotCall("candidate", 1, 4, "a.pt")] and sets == [1]
    for bad in (
        {"stop_reason": None} | {"num_input_sets": "two"},
        {"device": "cpu"},
        {"arms": {"candidate": {"samples_ns": [0]}, "baseline": {"samples_ns": [1]}}},
    ):
        with pytest.raises(AgentError, match="malformed"):
            _parsed(
                {k: v for k, v in _answer(**bad).items() if v is not None},
                list(ARMS),
                0,
                None,
                None,
            )
