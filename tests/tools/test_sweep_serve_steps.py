"""sweep_serve's step judgement and race statistics, without an engine: which steps are kept
out of the verdicts (warm cache by the engine's counter, a starved client measured again, one
wave), every child finding carried to the answer, and the race's paired ratio and interval
checked against a plain-Python computation of the same numbers."""

from __future__ import annotations

import math
import statistics

from infra_agent.tools.sweep_serve import answer, race, steps
from infra_agent.tools.sweep_serve.ladder import Climb
from infra_agent.tools.sweep_serve.plan import Planned
from infra_agent.tools.sweep_serve.schema import Input

INP = Input.model_validate(
    {
        "space": {"max_num_seqs": [1]},
        "workload": {"num_requests": 8},
        "ladder": {"concurrencies": [1, 4, 8]},
        "slo": {"ttft_p99_ms": 500},
    }
)


def _result(hits=(0.0, 0.0), findings=(), ttft=100.0, tokens=(300.0, 320.0)) -> dict:
    return {
        "metrics": {"ttft_p99": ttft, "output_throughput": statistics.median(tokens), "failed": 0},
        "spread": {"ttft_p99": [ttft, ttft]},
        "prefix_cache_hit_rates": list(hits),
        "findings": list(findings),
        "repeats": [{"output_throughput": t} for t in tokens],
    }


def test_a_warm_step_by_the_engines_own_counter_is_kept_out_of_the_verdicts():
    warm = steps.build(INP, 4, "e4", False, _result(hits=(0.0, 0.71)))
    assert warm.slo_met and not warm.counts
    assert warm.excluded.startswith("cache_warm_step: ") and "0.71" in warm.excluded
    cold = steps.build(INP, 4, "e4", False, _result(hits=(0.0, 0.01)))
    assert cold.counts and cold.excluded is None


def test_a_starved_step_is_measured_again_and_one_wave_is_kept_out():
    starved = steps.build(
        INP, 1, "e1", False, _result(findings=["client_starved: waited 412 ms of 475 ms"])
    )
    assert steps.measure_again(starved) and starved.excluded.startswith("client_starved: ")
    gap = steps.build(INP, 1, "e1", False, _result(findings=["client_engine_gap: TTFT 40 ms"]))
    assert gap.counts and not steps.measure_again(gap)  # carried, not excluded
    wave = steps.build(INP, 8, "e8", False, _result())  # num_requests 8 <= 8 in flight
    assert wave.excluded.startswith("single_wave: ") and not steps.measure_again(wave)
    # one wave by the plan and starved too (beside two CPU hogs): no new measurement can make it
    # a verdict, so it is not measured again; the starved finding is carried as every finding is
    starved_wave = steps.build(INP, 8, "e8", False, _result(findings=["client_starved: 63 ms"]))
    assert starved_wave.excluded.startswith("single_wave: ")
    assert not steps.measure_again(starved_wave) and starved_wave.findings


def test_every_child_finding_reaches_the_config_and_the_sweep_and_kept_out_steps_never_count():
    made = [
        steps.build(INP, 1, "e1", False, _result(findings=["client_engine_gap: a", "x_y: b"])),
        steps.build(INP, 4, "e4", False, _result(hits=(0.2, 0.9))),
        steps.build(INP, 8, "e8", False, _result(findings=["client_engine_gap: c"])),
    ]
    made[1].set_aside = ["e4-first"]
    planned = Planned({"max_num_seqs": 1}, "max_num_seqs=1", {})
    cfg = answer.config_answer(planned, Climb(steps=made), "concurrency")
    assert cfg.highest_load == 1  # 4 was warm, 8 one wave: neither is a verdict
    for s in made:
        for f in s.findings:
            assert f"at {s.load:g} in flight: {f}" in cfg.findings
    assert any("e4-first set aside" in f for f in cfg.findings)
    summary = answer.sweep_findings([cfg])
    assert "client_engine_gap: in 2 of 3 steps" in summary[0]
    assert "kept_out: 1 step(s) kept out of the SLO verdicts for cache_warm_step" in summary
    assert "kept_out: 1 step(s) kept out of the SLO verdicts for single_wave" in summary
    made[0].over_saturated = True  # an over-saturated step is never the highest load
    assert answer.config_answer(planned, Climb(steps=made), "concurrency").highest_load is None


def test_the_race_ratio_and_interval_against_a_plain_computation():
    result = {
        "repeats": [{"goodput": 10.0}, {"goodput": 12.0}],
        "baseline_repeats": [{"goodput": 5.0}, {"goodput": 5.5}],
    }
    ratios = race.paired_ratios(result, "goodput")
    assert ratios == [2.0, 12.0 / 5.5]
    ratios += [1.9, 2.1]
    low, high = race.ratio_interval(ratios, 1)
    logs = [math.log(r) for r in ratios]
    t975_3 = 3.182446305284263  # Student t, 3 degrees of freedom, 97.5%
    half = t975_3 * statistics.stdev(logs) / 2
    assert math.isclose(low, math.exp(statistics.fmean(logs) - half), rel_tol=1e-6)
    assert math.isclose(high, math.exp(statistics.fmean(logs) + half), rel_tol=1e-6)
    # no per-request SLO: goodput is null and request throughput counts every request
    plain = {
        "repeats": [{"goodput": None, "request_throughput": 3}],
        "baseline_repeats": [{"goodput": None, "request_throughput": 4}],
    }
    assert race.paired_ratios(plain, "goodput") == [0.75]


def test_the_race_sizes_its_repeats_to_last_race_repeat_s_at_the_deciding_load():
    """Short repeats measure the host's scheduling (race.py): each race repeat sends enough
    requests to last race_repeat_s at the slower of the two configs' request throughput at the
    deciding load, as their ladder steps measured it; never fewer than the workload's own."""

    def config(label: str, rates: dict[int, float]):
        made = []
        for load, rate in rates.items():
            result = _result()
            result["metrics"]["request_throughput"] = rate
            made.append(steps.build(INP, load, f"{label}{load}", False, result))
        planned = Planned({"max_num_seqs": 1}, label, {})
        return planned, answer.config_answer(planned, Climb(steps=made), "concurrency")

    fast, slow = config("a", {1: 90.0, 4: 410.0}), config("b", {1: 80.0, 4: 333.3})
    assert fast[1].highest_load == slow[1].highest_load == 4
    contest = race.contest(INP, fast, slow)
    assert contest.load == 4
    assert contest.repeat_requests == 334  # 1.0 s x 333.3 req/s, the slower side, rounded up
    longer = INP.model_copy(update={"race_repeat_s": 2.5})
    assert race.contest(longer, fast, slow).repeat_requests == 834
    off = INP.model_copy(update={"race_repeat_s": 0.0})
    assert race.contest(off, fast, slow).repeat_requests == INP.workload.num_requests == 8
    trickle = config("c", {1: 2.0, 4: 3.0})  # 3 req/s: 1 s is fewer than the workload's 8
    assert race.contest(INP, fast, trickle).repeat_requests == 8
    flood = INP.model_copy(
        update={"race_repeat_s": 60.0}
    )  # 60 s x 333 req/s: serve_benchmark's cap
    assert race.contest(flood, fast, slow).repeat_requests == race.MAX_REPEAT_REQUESTS == 5000
    # the step's own request throughput is what the sweep answer carries
    assert slow[1].steps[1].request_throughput == 333.3


def test_a_sweep_whose_steps_never_ran_says_why():
    from infra_agent.tools.sweep_serve import _summary

    why = "concurrency 1: serve_benchmark failed: the cost probe estimates 812 s, over 300 s"
    planned = Planned({"max_num_seqs": 1}, "max_num_seqs=1", {})
    cfg = answer.config_answer(planned, Climb(stopped=why, complete=False), "concurrency")
    findings = answer.not_run({0: Climb(stopped=why, complete=False)}, [planned])
    assert findings == [f"steps_not_run: max_num_seqs=1: {why}"]
    out = _output([cfg])
    out.findings = findings
    summary = _summary(INP, out)
    assert "no step ran" in summary and why in summary, summary
    assert "no config met the SLO" not in summary
    # a step's findings reach the summary too, counted by code
    starved = steps.build(INP, 1, "e1", False, _result(findings=["client_starved: 87% waiting"]))
    out.configs = [answer.config_answer(planned, Climb(steps=[starved]), "concurrency")]
    summary = _summary(INP, out)
    assert "steps' findings: client_starved in 1 step(s)" in summary, summary
    assert "1 step(s) kept out of the SLO verdicts" in summary


def test_the_plot_shows_every_slo_metric_not_only_the_first():
    from infra_agent.tools.common.plots import serve_sweep_png

    inp = INP.model_copy(update={"slo": {"ttft_p99_ms": 500, "tpot_p99_ms": 20}})
    step = steps.build(inp, 1, "e1", False, _result())
    step.slo_values["tpot_p99_ms"] = [18.0, 31.0]  # broke TPOT, within TTFT
    planned = Planned({"max_num_seqs": 1}, "max_num_seqs=1", {})
    cfg = answer.config_answer(planned, Climb(steps=[step]), "concurrency")
    (point,) = answer.plot_steps([cfg], list(inp.slo))
    assert point["latency"] == {"ttft_p99": 100.0, "tpot_p99": 31.0}
    png = serve_sweep_png([point], [], "requests in flight", {"ttft_p99": 500, "tpot_p99": 20})
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def _output(configs, best=None):
    from infra_agent.tools.sweep_serve.schema import Output

    return Output(
        load_kind="concurrency",
        configs=configs,
        front=[],
        best=best,
        best_config=None,
        best_value=None,
        dropped=[],
        not_tried=[],
        partial=False,
        budget_note=None,
        slo_judged={},
        interval_note="",
        trials=[],
        measured_steps=sum(len(c.steps) for c in configs),
        reused_steps=0,
        num_configs=len(configs),
        findings=[],
    )


def test_a_config_alone_in_being_judged_is_not_called_best_without_undecided():
    """vLLM on a loaded host (issue 35's rerun check): every step of max_num_seqs=8 had a
    starved load generator and was kept out, so max_num_seqs=1 was the only config judged and
    no race ran; the summary called it best as if it had won. Nothing was compared with it."""
    from infra_agent.tools.sweep_serve import _summary

    starved = ["client_starved: the load generator waited 885 ms of 1187 ms (75%)"]
    one = Planned({"max_num_seqs": 1}, "max_num_seqs=1", {})
    eight = Planned({"max_num_seqs": 8}, "max_num_seqs=8", {})
    judged = answer.config_answer(
        one, Climb(steps=[steps.build(INP, 1, "e1", False, _result())]), "concurrency"
    )
    never = answer.config_answer(
        eight,
        Climb(
            steps=[steps.build(INP, c, f"e{c}", False, _result(findings=starved)) for c in (1, 4)]
        ),
        "concurrency",
    )
    assert judged.highest_load == 1 and never.highest_load is None
    summary = _summary(INP, _output([judged, never], best="max_num_seqs=1"))
    assert "best by goodput: max_num_seqs=1" in summary
    assert "undecided: max_num_seqs=8 had no step that counts" in summary, summary
    assert "not a winner" in summary
    # a config judged and failing the SLO at every step is beaten, not unjudged
    slow = answer.config_answer(
        eight, Climb(steps=[steps.build(INP, 1, "e1", False, _result(ttft=900.0))]), "concurrency"
    )
    assert slow.highest_load is None and slow.steps[0].counts
    assert "undecided" not in _summary(INP, _output([judged, slow], best="max_num_seqs=1"))
    # nothing judged anywhere: said as such, not as "no config met the SLO"
    none = _summary(INP, _output([never]))
    assert "no config judged: every step measured was kept out" in none
    assert "no config met the SLO" not in none
