"""The non-statistical parts of a microbench answer: expect over its numbers, disturbances, plot."""

import pytest

from infra_agent.tools.common.expect import judge
from infra_agent.tools.common.plots import sweep_png
from infra_agent.tools.microbench.expect_fields import CATALOGUE, facts
from infra_agent.tools.microbench.report import cpu_counters, disturbances
from infra_agent.tools.microbench.schema import ArmResult, Input, Output, ShapeResult


def _arm(code: str, median_ms: float) -> ArmResult:
    return ArmResult(
        code=code,
        n=50,
        median_ms=median_ms,
        mean_ms=median_ms,
        p10_ms=0.9 * median_ms,
        p90_ms=1.1 * median_ms,
        iqr_ms=0.1 * median_ms,
        cv=0.05,
        median_rel_se_pct=0.5,
        spot_check="passed",
    )


def _ab_output(ci: tuple[float, float]) -> Output:
    shape = ShapeResult(
        shape={"N": 4096},
        dtype="float32",
        flops_per_call=4096,
        bytes_per_call=49152,
        stop_reason="budget",
        warmup_calls=5,
        warmup_stable=True,
        num_input_sets=4,
        candidate=_arm("triton", 0.93),
        baseline=_arm("reference", 1.0),
        ratio=0.93,
        ci_low=ci[0],
        ci_high=ci[1],
        min_detectable_effect_pct=3.0,
        verdict="faster",
    )
    return Output(
        verdict="faster",
        shapes=[shape],
        device={},
        clocks={},
        ceilings={},
        timer="",
        disturbances=[],
    )


@pytest.mark.parametrize(
    "ci, expected",
    [((0.90, 0.94), "supported"), ((0.91, 0.99), "inconclusive"), ((0.96, 0.99), "contradicted")],
)
def test_a_b_conditions_are_judged_by_the_ratio_ci(ci, expected):
    inp = Input(kernel="rmsnorm", baseline="reference")
    answer = judge(
        ["median_ms <= 0.95 * baseline.median_ms"], facts(inp, _ab_output(ci), None), CATALOGUE
    )
    assert answer.answer == expected  # the same call as the ratio's CI against 0.95
    assert judge(["ratio <= 0.95"], facts(inp, _ab_output(ci), None), CATALOGUE).answer == expected
    cmp = answer.conditions[0].comparisons[0]
    assert (
        cmp.left == 0.93
        and cmp.left_interval == pytest.approx(list(ci))
        and cmp.right == pytest.approx(0.95)
    )


def test_disturbances_name_the_load_and_the_cpu_caveat():
    before = cpu_counters()
    sum(i * i for i in range(200_000))
    notes = disturbances("cpu", before, cpu_counters(), threads=1)
    assert any("load average" in n for n in notes)
    assert any("interpreter" in n and "1 torch thread" in n for n in notes)


def test_sweep_plot_is_a_png():
    rows = [
        {
            "arm": arm,
            "bytes": b,
            "median_ms": m,
            "p10_ms": m * 0.9,
            "p90_ms": m * 1.2,
            "pct_roofline": p,
        }
        for arm in ("candidate", "baseline")
        for b, m, p in ((1e3, 0.01, 1.0), (1e6, 0.5, 20.0))
    ]
    assert sweep_png(rows)[:8] == b"\x89PNG\r\n\x1a\n"


def test_page_faults_per_call_name_the_regime():
    from infra_agent.tools.microbench.jobs import ArmTimes
    from infra_agent.tools.microbench.plan import Code
    from infra_agent.tools.microbench.report import page_fault_notes

    arms = [
        Code(name="candidate", label="triton", entry="f"),
        Code(name="baseline", label="reference", entry="g"),
    ]
    times = {"candidate": ArmTimes((1,) * 100, 102400), "baseline": ArmTimes((1,) * 100, 3)}
    (note,) = page_fault_notes({"M": 2048, "N": 2048}, arms, times)
    assert "M=2048,N=2048: triton 1.02e+03, reference 0.03" in note and "fresh pages" in note
    times["candidate"] = ArmTimes((1,) * 100, 0)
    assert "warm-loop regime" in page_fault_notes({"N": 8}, arms, times)[0]
    assert page_fault_notes({"N": 8}, arms[:1], {"candidate": ArmTimes((1,), None)}) == []
