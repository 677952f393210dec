"""The non-statistical parts of a microbench answer: hypothesis answers, disturbances, plot."""

from infra_agent.tools.microbench.report import answer_hypothesis, cpu_counters, disturbances, sweep_plot


def test_speed_claims_are_judged_against_the_verdict():
    assert answer_hypothesis("tiling makes it faster", "faster", ["memory"], 1.0).startswith("supported")
    assert answer_hypothesis("tiling makes it faster", "slower", ["memory"], 1.0).startswith("contradicted")
    assert "not resolved" in answer_hypothesis("tiling makes it faster", "inconclusive", [], 3.0)
    assert answer_hypothesis("the rewrite is no slower", "faster", [], 1.0).startswith("supported")
    assert answer_hypothesis("the rewrite is no slower", "slower", [], 1.0).startswith("contradicted")
    assert "void" in answer_hypothesis("tiling makes it faster", "invalid", [], 1.0)
    assert answer_hypothesis(None, "faster", [], 1.0) == ""


def test_bound_claims_are_judged_against_the_bound_class():
    both = [("N=10", "memory"), ("N=20", "memory")]
    assert "memory-bound claim supported" in answer_hypothesis("it is memory-bound", None, both, None)
    assert "compute-bound claim contradicted" in answer_hypothesis("still compute-bound", None, both, None)
    mixed = [("N=10", "latency"), ("N=1000000", "memory")]
    assert "holds at N=1000000 only" in answer_hypothesis("memory-bound when large", None, mixed, None)


def test_disturbances_name_the_load_and_the_cpu_caveat():
    before = cpu_counters()
    sum(i * i for i in range(200_000))
    notes = disturbances("cpu", before, cpu_counters(), threads=1)
    assert any("load average" in n for n in notes)
    assert any("interpreter" in n and "1 torch thread" in n for n in notes)


def test_sweep_plot_is_a_png():
    rows = [{"arm": arm, "bytes": b, "median_ms": m, "p10_ms": m * 0.9, "p90_ms": m * 1.2, "pct_roofline": p}
            for arm in ("candidate", "baseline") for b, m, p in ((1e3, 0.01, 1.0), (1e6, 0.5, 20.0))]
    assert sweep_plot(rows)[:8] == b"\x89PNG\r\n\x1a\n"
