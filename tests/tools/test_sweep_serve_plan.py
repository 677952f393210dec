"""sweep_serve's pure parts, without an engine: the over-saturation rule on made-up ladders, the
SLOs goodput counts, configs built from the space, and step keys that ignore the engine handle."""

from infra_agent.tools.sweep_serve import plan
from infra_agent.tools.sweep_serve.ladder import over_saturated
from infra_agent.tools.sweep_serve.schema import Input, Step


def _step(load: float, tokens_s: float, ttft_ms: float, spread: float = 0.0) -> Step:
    return Step(
        load=load,
        experiment_id=f"e{load:g}",
        reused=False,
        slo_met=True,
        broke=[],
        goodput=None,
        goodput_interval=None,
        output_throughput=tokens_s,
        output_throughput_interval=[tokens_s * (1 - spread / 2), tokens_s * (1 + spread / 2)],
        output_throughput_per_user=tokens_s / load,
        ttft_p50_ms=ttft_ms,
        slo_values={},
        failed=0,
    )


def test_over_saturation_needs_two_flat_steps_with_rising_ttft():
    flat = [_step(1, 900, 3), _step(2, 950, 11), _step(4, 940, 27)]
    assert over_saturated(flat, "concurrency").startswith("over-saturated at concurrency 4")
    assert over_saturated(flat[:2], "concurrency") is None  # one transition is not enough
    scaling = [_step(1, 300, 10), _step(2, 580, 10.5), _step(4, 1100, 12)]
    assert over_saturated(scaling, "concurrency") is None  # throughput follows the load
    queue_free = [_step(1, 900, 10), _step(2, 950, 10.2), _step(4, 940, 10.4)]
    assert over_saturated(queue_free, "concurrency") is None  # flat, but TTFT does not rise
    # +41% and +50% per doubling is growth, however wide the repeats' spreads: the spreads are
    # not added to the threshold (that read a +41% rise as flat and crowned a saturated config)
    noisy = [_step(1, 400, 3, 1.2), _step(2, 564, 11, 1.2), _step(4, 846, 27, 1.2)]
    assert over_saturated(noisy, "rate") is None


def test_flat_reads_the_repeats_paired_not_the_sum_of_their_spreads():
    # repeat i of one step against repeat i of the next: each pair grew by 38-45%, while the
    # medians' spreads overlap (a drifting host moved both repeats of each step alike)
    rising = [_step(1, 400, 3), _step(2, 560, 11), _step(4, 790, 27)]
    rising[0].output_throughput_repeats = [300, 500]
    rising[1].output_throughput_repeats = [420, 700]
    rising[2].output_throughput_repeats = [600, 980]
    assert over_saturated(rising, "concurrency") is None
    flat = [_step(1, 400, 3), _step(2, 410, 11), _step(4, 400, 27)]
    flat[0].output_throughput_repeats = [300, 500]
    flat[1].output_throughput_repeats = [310, 510]
    flat[2].output_throughput_repeats = [300, 500]
    assert over_saturated(flat, "concurrency").startswith("over-saturated at concurrency 4")


def test_goodput_counts_each_latency_at_its_highest_percentile_limit():
    slo = {"ttft_p50_ms": 100, "ttft_p99_ms": 200, "tpot_mean_ms": 20, "itl_p99_ms": 30}
    assert plan.goodput_slos(slo) == {"slo_ttft_ms": 200, "slo_tpot_ms": 20}
    judged = plan.slo_judged(slo)
    assert "goodput counts" in judged["ttft_p99_ms"] and "goodput" not in judged["ttft_p50_ms"]
    assert "goodput" not in judged["itl_p99_ms"]  # no per-request ITL limit in serve_benchmark


def test_configs_override_base_args_and_extra_args_append_shell_words():
    inp = Input.model_validate(
        {
            "base_args": {"model": "tiny", "max_num_seqs": 8, "extra_args": ["--a"]},
            "configs": [{"max_num_seqs": 2, "extra_args": "--prefill-delay-ms 40"}],
            "ladder": {"rates": [1, 2]},
        }
    )
    (config,) = plan.configs(inp)
    assert config.launch["args"] == {
        "model": "tiny",
        "max_num_seqs": 2,
        "extra_args": ["--a", "--prefill-delay-ms", "40"],
    }
    one = plan.bench_arguments(inp, "rate", 2.0, "serve-1")
    other = plan.bench_arguments(inp, "rate", 2.0, "serve-2")
    assert one["workload"]["rate"] == 2.0 and one["handle"] != other["handle"]
    assert plan.step_key(config.key, one) == plan.step_key(config.key, other)


def test_every_step_attempt_and_race_round_sends_prompts_of_its_own():
    """The prompts' seeds: each (draw, repeat) of serve_benchmark and each warm-up apart, for
    every ladder step, attempt and race round (serve_benchmark's own repeat_seed spreads them)."""
    from infra_agent.tools.serve_benchmark.plan import repeat_seed

    inp = Input.model_validate(
        {"space": {"max_num_seqs": [1]}, "ladder": {"concurrencies": list(range(1, 17))}}
    )
    draws = [plan.step_draw(s, a) for s in range(16) for a in range(plan.ATTEMPTS)]
    draws += [plan.RACE_DRAW + r for r in range(10)]
    assert len(set(draws)) == len(draws)
    seeds = [
        plan.bench_arguments(inp, "concurrency", 1, "h", d)["workload"].get("seed", 0)
        for d in draws
    ]
    sent = [repeat_seed(s, i) for s in seeds for i in range(-25, 25)]  # repeats and warm-ups
    assert len(set(sent)) == len(sent)


def test_an_unclosed_quote_in_extra_args_is_refused_naming_the_config():
    import pytest

    from infra_agent.tools.base import AgentError

    inp = Input.model_validate(
        {"configs": [{"max_num_seqs": 2, "extra_args": "--seed '1"}], "ladder": {"rates": [1]}}
    )
    with pytest.raises(
        AgentError, match="config .max_num_seqs=2 extra_args=--seed '1.*No closing quotation"
    ):
        plan.configs(inp)


def test_configs_may_leave_a_key_to_the_engine_default():
    inp = Input.model_validate(
        {
            "base_args": {"model": "tiny"},
            "configs": [{"max_num_seqs": 2}, {"max_num_batched_tokens": 64, "max_num_seqs": 4}],
            "ladder": {"rates": [1]},
        }
    )
    one, two = plan.configs(inp)
    assert one.config == {"max_num_seqs": 2} and one.label == "max_num_seqs=2"
    assert one.launch["args"] == {"model": "tiny", "max_num_seqs": 2}
    assert two.launch["args"] == {"model": "tiny", "max_num_seqs": 4, "max_num_batched_tokens": 64}


def test_an_unknown_budget_key_is_refused():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="wall_seconds"):
        Input.model_validate(
            {
                "space": {"max_num_seqs": [1]},
                "ladder": {"rates": [1]},
                "budget": {"wall_seconds": 5},
            }
        )
