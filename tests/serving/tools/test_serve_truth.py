"""serve_benchmark through the MCP client on the built-in engine: each repeat sends fresh prompts
(prefix-cache hit rate per repeat, equal and cold), reuse_prompts is a cache-warm run that the
cache_warm_repeats finding names, and every repeat carries the engine's own TTFT p50 (with its
histogram bucket) that the client's numbers are checked against (issue 21)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import call
from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)

from infra_agent.serving.loadgen.process import generator_pids
from infra_agent.tools.serve_benchmark import engine_truth
from infra_agent.tools.serve_benchmark.jobs import remeasure_limit
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


class _StalledClient:
    """A progress callback that stops the load generator for stall_s at every request finished
    in a run whose messages `matches`, so it reads the engine's output late, as a starved client
    would. The generator is a process of its own, a child of the in-process server: it is stopped
    (SIGSTOP) and this process's loop, which relays its progress, blocks meanwhile.

    Progress reaches this callback late (each stall holds the messages behind it), so a run's
    last messages can arrive while the next run, maybe the other side's, is under way: only the
    generator that was running when its run's first message arrived is stopped (CI once saw the
    other side's repeats stalled, and a planted run whose stalls mostly fell after it)."""

    def __init__(self, matches, stall_s: float = 0.08):
        self.matches, self.stall_s = matches, stall_s
        self.seen: list[str] = []
        self.stopped_s: dict[str, float] = {}  # a run's label -> how long its generator was stopped
        self._label, self._pinned = "", set[int]()

    async def __call__(self, progress, total, message) -> None:
        message = message or ""
        self.seen.append(message)
        if not self.matches(message):
            return
        label = message.split(":", 1)[0]
        if label != self._label:
            self._label, self._pinned = label, set(generator_pids(os.getpid()))
        running = self._pinned & set(generator_pids(os.getpid()))
        if running:
            self.stopped_s[label] = self.stopped_s.get(label, 0.0) + _stop(running, self.stall_s)


def _stop(pids: set[int], stall_s: float) -> float:
    """Stop the processes for stall_s; how long they were stopped, s."""
    start = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(stall_s)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    return time.monotonic() - start


def _measured_again_and_agreed(out: dict, side: str, repeat: int) -> bool:
    """Whether the planted repeat was measured again, alone on its side, and the new measurement
    agreed with the engine."""
    again = [r for r in out["remeasured"] if r["side"] == side]
    return [(r["repeat"], r["agreed"]) for r in again] == [(repeat, True)]


def _the_host_read_late_too(out: dict, side: str, repeat: int) -> str:
    """The honest answer when the host, not only the planted stall, read measurements late (a
    2-core host under other load starves the load generator now and then: CI saw 34% of a run;
    two CPU hogs here, every seed): either more of the side's repeats disagreed with the engine
    than may be measured again (the setup, not a moment: nothing is), or the new measurement was
    read late too and the first kept its place, said in a finding. Asserted; returns why."""
    whose = {"baseline": "the baseline's", "this engine": "this engine's"}[side]
    repeats = out["baseline_repeats"] if side == "baseline" else out["repeats"]
    late = [i for i, r in enumerate(repeats) if engine_truth.disagreement(RepeatMetrics(**r))]
    again = [r for r in out["remeasured"] if r["side"] == side]
    if not again:
        assert len(late) > remeasure_limit(len(repeats)), (late, out["findings"])
        return f"{len(late)} of {whose} {len(repeats)} repeats disagreed: nothing measured again"
    (planted,) = [r for r in again if r["repeat"] == repeat]
    if not planted["agreed"]:
        assert any(
            f.startswith(f"repeat_remeasured: {whose} repeat {repeat}") and "disagreed again" in f
            for f in out["findings"]
        ), out["findings"]
        return f"{whose} repeat {repeat} was read late again when measured again"
    assert len(again) > 1, again  # another repeat, read late by the host, was measured again too
    return f"{whose} repeats {[r['repeat'] for r in again]} were measured again"


@pytest.mark.anyio
async def test_a_repeat_the_client_read_late_is_measured_again(serve_client):
    """CI once failed an attribution on vLLM because one of the baseline's three repeats was read
    in a burst (client TTFT 128 ms against the engine's ~15 ms): its interval swallowed a 10x
    queue change. A repeat the client read late is measured again."""
    c = serve_client
    eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    args = {"handle": eng["handle"], "baseline_handle": eng["handle"], "repeats": 3}
    # 150 ms stalls: the slowest request of a stalled run waited out part of one, which for 80 ms
    # stalls was 36-110 ms more than the kept run's slowest (an idle fresh clone read 102 against
    # 66 ms, under the witness's 40 ms margin below)
    for seed in (4, 6, 8):  # again when the host, not the stall, read another measurement late
        stalled = _StalledClient(lambda m: m.startswith("repeat 2/3 (baseline):"), stall_s=0.15)
        result = await c.call_tool(
            "serve_benchmark",
            args | {"workload": WORKLOAD | {"seed": seed, "output_len": 8}},
            progress_callback=stalled,
        )
        assert not result.is_error, result.content
        out = result.structured_content
        if _measured_again_and_agreed(out, "baseline", 2):
            break
    else:
        pytest.xfail(_the_host_read_late_too(out, "baseline", 2))
    # (a repeat of this engine's, read late by the host, may be measured again too)
    (again,) = [r for r in out["remeasured"] if r["side"] == "baseline"]
    # the measurement set aside is the stalled one: its generator was stopped, and the client's
    # own clock shows it (the slowest request waited out a stall the kept measurement did not)
    assert stalled.stopped_s["repeat 2/3 (baseline)"] >= 0.15, stalled.stopped_s
    late, kept = again["set_aside"], out["baseline_repeats"][1]
    assert late["latencies_ms"]["e2el"]["p99"] > kept["latencies_ms"]["e2el"]["p99"] + 40, (
        late,
        kept,
    )
    assert any(m.startswith("repeat 2/3 (baseline) again:") for m in stalled.seen), stalled.seen
    assert any(
        f.startswith("repeat_remeasured: the baseline's repeat 2") and "it agreed" in f
        for f in out["findings"]
    ), out["findings"]
    # the new measurement agrees with the engine, and sent prompts no earlier repeat had
    assert engine_truth.disagreement(RepeatMetrics(**kept)) is None, kept
    assert kept["phases_ms"]["prefix_cache_hit_rate"] < 0.1
    await call(c, "stop_serve", handle=eng["handle"])


@pytest.mark.anyio
async def test_a_side_read_late_throughout_is_named(serve_client):
    """Every baseline repeat read late: the setup, not a moment; nothing is measured again and
    the findings name the baseline's side."""
    c = serve_client
    eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    result = await c.call_tool(
        "serve_benchmark",
        {"handle": eng["handle"], "baseline_handle": eng["handle"], "repeats": 3}
        | {"workload": WORKLOAD | {"seed": 5, "output_len": 8}},
        progress_callback=_StalledClient(lambda m: "(baseline)" in m),
    )
    out = result.structured_content
    assert not [r for r in out["remeasured"] if r["side"] == "baseline"], out["remeasured"]
    named = [
        f for f in out["findings"] if f.startswith("client_engine_gap: on the baseline engine")
    ]
    assert named, out["findings"]
    others = [f for f in out["findings"] if f.startswith("client_engine_gap:") and f not in named]
    if others:  # the host read this engine's repeats late too: said, from its own numbers
        late = [r for r in out["repeats"] if engine_truth.disagreement(RepeatMetrics(**r))]
        assert late, (others, out["repeats"])
    await call(c, "stop_serve", handle=eng["handle"])


@pytest.mark.anyio
async def test_a_cold_repeat_measured_again_is_cold(serve_client):
    """A cache-warm run (reuse_prompts) whose first, cold repeat was read late: measured again, it
    is as cold as the first measurement was (CI once kept a re-measurement that found the first
    one's prompts in the cache: hit rate 0.67 where the first repeat's is ~0)."""
    c = serve_client
    eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    for seed in (7, 9):
        result = await c.call_tool(
            "serve_benchmark",
            {"handle": eng["handle"], "repeats": 3}
            | {"workload": WORKLOAD | {"seed": seed, "output_len": 8, "reuse_prompts": True}},
            progress_callback=_StalledClient(lambda m: m.startswith("repeat 1/3:")),
        )
        assert not result.is_error, result.content
        out = result.structured_content
        if [r["repeat"] for r in out["remeasured"]] == [1]:
            break  # (kept or not: either way the re-measurement must have been cold)
    else:
        pytest.xfail(_the_host_read_late_too(out, "this engine", 1))
    (again,) = out["remeasured"]
    assert again["repeat"] == 1, again
    rates = out["prefix_cache_hit_rates"]  # whichever measurement was kept, it was cold
    assert rates[0] < 0.1 and min(rates[1:]) > 0.5, rates
    assert again["set_aside"]["phases_ms"]["prefix_cache_hit_rate"] < 0.1, again
    await call(c, "stop_serve", handle=eng["handle"])
