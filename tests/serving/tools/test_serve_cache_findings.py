"""serve_benchmark's findings about what a measurement measured, on the built-in engine (issue 36,
item 5): a baseline experiment measured on a warm prefix cache against a cold run is
baseline_cache_warm (the hit rates checked against the engine's own /metrics counters, scraped
by the test around each call), and a run whose requests all fit in flight at once is
single_wave."""

from __future__ import annotations

import httpx
import pytest
from conftest import call
from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)

from infra_agent.serving.unix_http import UnixSocketTransport
from infra_agent.tools.serve_benchmark.phases import PREFIX_HITS, PREFIX_QUERIES, parse

pytestmark = pytest.mark.slow

# 48 measured requests: the cost probe's 5 requests (1, then 4 together; the same prompts every
# call) are at most 5 of the 53 the engine counts over a call, so its own call-wide hit rate lies
# within PROBE_SHARE of the measured repeat's
WORKLOAD = {"num_requests": 48, "input_len": 48, "output_len": 2, "max_concurrency": 4, "warmup": 0}
PROBE_SHARE = 5 / 53


async def _engine_hit_rate(
    c, engine: dict, seed: int, *, resend: bool = False, **args
) -> tuple[dict, float, int]:
    """One serve_benchmark call on a launched engine (launch_serve's answer) with WORKLOAD's
    prompts of `seed`, the prefix-cache hit rate the engine's own counters say it saw over the
    call (hits / queries, prompt tokens), and the seed the kept call sent.

    A repeat the host read late is measured again on a prompt set of its own (repeat_remeasured),
    so that call's counters mix two measurements, one of them not the asked-for prompts: the
    engine's rate must then be the mean of the kept and the set-aside measurement's (same
    request count and lengths), and the call is made again, up to 3 times, for the scenario.
    Made again with the same seed, its prompts would be cached by the call before (a clone read
    0.67, a warm rate, for a "cold" run so): a call meant cold (not `resend`) takes a new seed."""
    handle = engine["handle"]
    whys = []
    for attempt in range(3):
        sent = seed if resend else seed + 1000 * attempt
        async with httpx.AsyncClient(transport=UnixSocketTransport(engine["socket"])) as http:
            before = parse((await http.get("http://engine/metrics")).text)
            out = await call(
                c,
                "serve_benchmark",
                handle=handle,
                repeats=1,
                workload=WORKLOAD | {"seed": sent},
                **args,
            )
            after = parse((await http.get("http://engine/metrics")).text)
        hits = after[PREFIX_HITS + "_total"] - before.get(PREFIX_HITS + "_total", 0.0)
        queries = after[PREFIX_QUERIES + "_total"] - before.get(PREFIX_QUERIES + "_total", 0.0)
        if not out["remeasured"]:
            return out, hits / queries, sent
        whys += [r["why"] for r in out["remeasured"]]
        rates = [out["metrics"]["prefix_cache_hit_rate"]] + [
            r["set_aside"]["phases_ms"]["prefix_cache_hit_rate"] for r in out["remeasured"]
        ]
        assert abs(sum(rates) / len(rates) - hits / queries) <= PROBE_SHARE, (rates, hits / queries)
    pytest.skip(
        "the host read a repeat late in 3 calls running: the scenario needs one clean call "
        f"(what disagreed: {'; '.join(whys)})"
    )


def _codes(out: dict) -> list[str]:
    return [f.split(":", 1)[0] for f in out["findings"]]


@pytest.mark.anyio
async def test_a_warm_baseline_against_a_cold_run_is_named_with_the_engines_own_rates(serve_client):
    c = serve_client
    eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    cold, engine_cold, seed = await _engine_hit_rate(c, eng, 5)
    # the same seed again on the same engine: a sweep step's situation, every prompt cached
    warm, engine_warm, _ = await _engine_hit_rate(c, eng, seed, resend=True)
    rate_cold, rate_warm = (
        cold["metrics"]["prefix_cache_hit_rate"],
        warm["metrics"]["prefix_cache_hit_rate"],
    )
    assert abs(rate_cold - engine_cold) <= PROBE_SHARE, (rate_cold, engine_cold)
    assert abs(rate_warm - engine_warm) <= PROBE_SHARE, (rate_warm, engine_warm)
    assert rate_cold < 0.1 and rate_warm > 0.5 and engine_warm > 0.5, (rate_cold, rate_warm)
    # a cold run (a seed this engine has not seen) against the warm experiment: named, with both rates
    run, engine_run, _ = await _engine_hit_rate(c, eng, 6, baseline=warm["experiment_id"])
    assert engine_run < 0.1 + PROBE_SHARE, engine_run
    (finding,) = [f for f in run["findings"] if f.startswith("baseline_cache_warm:")]
    assert f"{100 * rate_warm:.0f}%" in finding and "the baseline measured a warm cache" in finding
    assert "Next:" in finding
    # both sides cold: nothing to name; and 48 requests at 4 in flight are many waves
    control, _, seed = await _engine_hit_rate(c, eng, 7, baseline=cold["experiment_id"])
    assert "baseline_cache_warm" not in _codes(control) + _codes(cold), control["findings"]
    assert "single_wave" not in _codes(control) + _codes(cold)
    # the other way round (this run warm: the seed just sent, the baseline cold) is named too
    rerun, engine_rerun, _ = await _engine_hit_rate(
        c, eng, seed, resend=True, baseline=cold["experiment_id"]
    )
    assert engine_rerun > 0.5 - PROBE_SHARE, engine_rerun
    (finding,) = [f for f in rerun["findings"] if f.startswith("baseline_cache_warm:")]
    assert "this run measured a warm cache" in finding
    await call(c, "stop_serve", handle=eng["handle"])


@pytest.mark.anyio
async def test_a_run_that_fits_in_flight_at_once_is_one_wave(serve_client):
    c = serve_client
    eng = (await call(c, "launch_serve", engine="builtin", args={"model": "tiny"}))["handle"]
    shape = {"input_len": 16, "output_len": 4, "warmup": 0}
    burst = await call(
        c,
        "serve_benchmark",
        handle=eng,
        repeats=1,
        workload=shape | {"num_requests": 8, "max_concurrency": 8},
    )
    (finding,) = [f for f in burst["findings"] if f.startswith("single_wave:")]
    assert "8 requests at 8 in flight" in finding and "Next:" in finding
    # all at once without a cap is one wave too; paced arrivals and several waves are not
    at_once = await call(
        c, "serve_benchmark", handle=eng, repeats=1, workload=shape | {"num_requests": 8}
    )
    assert "single_wave" in _codes(at_once), at_once["findings"]
    for other in ({"num_requests": 8, "max_concurrency": 2}, {"num_requests": 8, "rate": 50.0}):
        out = await call(c, "serve_benchmark", handle=eng, repeats=1, workload=shape | other)
        assert "single_wave" not in _codes(out), (other, out["findings"])
    await call(c, "stop_serve", handle=eng)
