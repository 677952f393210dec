"""serve_benchmark through the MCP client on the built-in engine: each repeat sends fresh prompts
(prefix-cache hit rate per repeat, equal and cold), reuse_prompts is a cache-warm run that the
cache_warm_repeats finding names, and every repeat carries the engine's own TTFT p50 (with its
histogram bucket) that the client's numbers are checked against (issue 21)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import call, generator_children
from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)

from infra_agent.tools.serve_benchmark import engine_truth
from infra_agent.tools.serve_benchmark.schema import RepeatMetrics

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # they plant and measure late reads

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


def _stall_the_client_during(prefix: str, stall_s: float):
    """A progress callback that stops the load generator for stall_s at every request finished
    while its message starts with `prefix`, so it reads the engine's output late, as a starved
    client would. The generator is a process of its own, a child of the in-process server: it is
    stopped (SIGSTOP) and this process's loop, which relays its progress, blocks meanwhile."""
    seen: list[str] = []

    async def on_progress(progress, total, message):
        seen.append(message or "")
        if (message or "").startswith(prefix):
            _stop_the_generator(stall_s)

    return on_progress, seen


def _stop_the_generator(stall_s: float) -> None:
    stopped = generator_children(os.getpid())
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(stall_s)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


def _the_planted_repeat_was_measured_again_and_agreed(out: dict) -> bool:
    """Whether the stalled baseline repeat 2 was measured again and the new measurement agreed
    with the engine. A 2-core host under other load starves the load generator now and then (CI:
    34% of a run; idle here, 1 run in 3 at 4 in flight): with a second repeat late the harness
    rightly measures none again (the setup, not a moment), and a re-measurement read late too is
    kept out. Either is the host, and the test tries another seed."""
    return any(
        (r["side"], r["repeat"], r["agreed"]) == ("baseline", 2, True) for r in out["remeasured"]
    )


@pytest.mark.anyio
async def test_a_repeat_the_client_read_late_is_measured_again_and_a_stalled_side_is_named(
    serve_client,
):
    """CI once failed an attribution on vLLM because one of the baseline's three repeats was read
    in a burst (client TTFT 128 ms against the engine's ~15 ms): its interval swallowed a 10x
    queue change. A repeat the client read late is measured again; a side read late throughout
    is named, the baseline's too."""
    c = serve_client
    eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    args = {"handle": eng["handle"], "baseline_handle": eng["handle"], "repeats": 3}
    for seed in (4, 6, 8):  # again when the host, not the stall, read another measurement late
        on_progress, seen = _stall_the_client_during("repeat 2/3 (baseline):", 0.08)
        result = await c.call_tool(
            "serve_benchmark",
            args | {"workload": WORKLOAD | {"seed": seed, "output_len": 8}},
            progress_callback=on_progress,
        )
        assert not result.is_error, result.content
        out = result.structured_content
        if _the_planted_repeat_was_measured_again_and_agreed(out):
            break
    # (a repeat of the host's own may be measured again too: only the planted one must be)
    (again,) = [r for r in out["remeasured"] if (r["side"], r["repeat"]) == ("baseline", 2)]
    assert again["agreed"], again
    late = again["set_aside"]  # the stalled measurement: the client's TTFT far above the engine's
    assert (
        late["latencies_ms"]["ttft"]["median"] > late["phases_ms"]["engine_ttft_p50_high_ms"] + 40
    ), late
    assert any(m.startswith("repeat 2/3 (baseline) again:") for m in seen), seen
    assert any(
        f.startswith("repeat_remeasured: the baseline's repeat 2") and "it agreed" in f
        for f in out["findings"]
    ), out["findings"]
    kept = out["baseline_repeats"][1]  # the new measurement agrees with the engine, and sent
    assert engine_truth.disagreement(RepeatMetrics(**kept)) is None, kept
    assert kept["phases_ms"]["prefix_cache_hit_rate"] < 0.1  # prompts no earlier repeat had

    # every baseline repeat read late: the setup, not a moment; nothing is measured again and the
    # finding names the baseline's side
    async def baseline_only(progress, total, message):
        if "(baseline)" in (message or ""):
            _stop_the_generator(0.08)

    result = await c.call_tool(
        "serve_benchmark",
        args | {"workload": WORKLOAD | {"seed": 5, "output_len": 8}},
        progress_callback=baseline_only,
    )
    out = result.structured_content
    assert not [r for r in out["remeasured"] if r["side"] == "baseline"], out["remeasured"]
    gaps = [f for f in out["findings"] if f.startswith("client_engine_gap")]
    assert gaps and all(f.startswith("client_engine_gap: on the baseline engine,") for f in gaps), (
        out["findings"]
    )

    # a cache-warm run (reuse_prompts) whose first, cold repeat was read late: measured again, it
    # is as cold as the first measurement was (CI once kept a re-measurement that found the first
    # one's prompts in the cache: hit rate 0.67 where the first repeat's is ~0)
    for seed in (7, 9):
        on_progress, _ = _stall_the_client_during("repeat 1/3:", 0.08)
        result = await c.call_tool(
            "serve_benchmark",
            {"handle": eng["handle"], "repeats": 3}
            | {"workload": WORKLOAD | {"seed": seed, "output_len": 8, "reuse_prompts": True}},
            progress_callback=on_progress,
        )
        assert not result.is_error, result.content
        out = result.structured_content
        if [r["repeat"] for r in out["remeasured"]] == [1]:
            break  # (a second repeat the host read late, and nothing is measured again)
    (again,) = out["remeasured"]
    assert again["repeat"] == 1, again
    rates = out["prefix_cache_hit_rates"]  # whichever measurement was kept, it was cold
    assert rates[0] < 0.1 and min(rates[1:]) > 0.5, rates
    assert again["set_aside"]["phases_ms"]["prefix_cache_hit_rate"] < 0.1, again
    await call(c, "stop_serve", handle=eng["handle"])
