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
    # +50% throughput per doubling is growth on a quiet host, but within the noise of wide repeats
    noisy = [_step(1, 400, 3, 1.2), _step(2, 600, 11, 1.2), _step(4, 900, 27, 1.2)]
    assert over_saturated(noisy, "rate") is not None
    assert (
        over_saturated(
            [_step(s.load, s.output_throughput or 0, s.ttft_p50_ms or 0) for s in noisy], "rate"
        )
        is None
    )


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
