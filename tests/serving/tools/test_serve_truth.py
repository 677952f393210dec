"""serve_benchmark through the MCP client on the built-in engine: each repeat sends fresh prompts
(prefix-cache hit rate per repeat, equal and cold), reuse_prompts is a cache-warm run that the
cache_warm_repeats finding names, and every repeat carries the engine's own TTFT p50 (with its
histogram bucket) that the client's numbers are checked against (issue 21)."""

from __future__ import annotations

import pytest
from conftest import call
from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)

pytestmark = pytest.mark.slow

WORKLOAD = {"num_requests": 12, "input_len": 48, "output_len": 2, "max_concurrency": 4, "warmup": 0}


@pytest.mark.anyio
async def test_fresh_prompts_per_repeat_and_cache_warm_repeats(serve_client):
    c = serve_client
    eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    fresh = await call(
        c, "serve_benchmark", handle=eng["handle"], workload=WORKLOAD | {"seed": 1}, repeats=3
    )
    rates = fresh["prefix_cache_hit_rates"]
    assert len(rates) == 3 and max(rates) < 0.1, rates  # every repeat as cold as the first
    assert not any(f.startswith("cache_warm_repeats") for f in fresh["findings"]), fresh["findings"]
    for rep in fresh["repeats"]:
        engine = rep["phases_ms"]
        assert (
            engine["engine_ttft_p50_low_ms"]
            <= engine["engine_ttft_p50_ms"]
            <= engine["engine_ttft_p50_high_ms"]
        )
        # the engine's TTFT (arrival to first token) is inside the client's (send to first chunk)
        assert engine["engine_ttft_p50_low_ms"] <= rep["latencies_ms"]["ttft"]["median"]

    warm = await call(
        c,
        "serve_benchmark",
        handle=eng["handle"],
        repeats=3,
        workload=WORKLOAD | {"seed": 2, "reuse_prompts": True},
    )
    rates = warm["prefix_cache_hit_rates"]
    assert rates[0] < 0.1 and min(rates[1:]) > 0.5, (
        rates
    )  # 3 full blocks of 16 of each 49-token prompt
    (finding,) = [f for f in warm["findings"] if f.startswith("cache_warm_repeats")]
    assert "reuse_prompts" in finding
    # the first call again (same seed, same engine): its prompts are in the cache in every repeat
    again = await call(
        c, "serve_benchmark", handle=eng["handle"], workload=WORKLOAD | {"seed": 1}, repeats=2
    )
    assert min(again["prefix_cache_hit_rates"]) > 0.5, again["prefix_cache_hit_rates"]
    assert any(
        f.startswith("cache_warm_repeats") and "same seed" in f for f in again["findings"]
    ), again["findings"]
    # A/A on one handle: the baseline side gets prompts of its own, so neither side runs warm
    aa = await call(
        c,
        "serve_benchmark",
        handle=eng["handle"],
        baseline_handle=eng["handle"],
        workload=WORKLOAD | {"seed": 3},
        repeats=2,
    )
    sides = aa["prefix_cache_hit_rates"] + [
        r["phases_ms"]["prefix_cache_hit_rate"] for r in aa["baseline_repeats"]
    ]
    assert max(sides) < 0.1, sides
    await call(c, "stop_serve", handle=eng["handle"])
