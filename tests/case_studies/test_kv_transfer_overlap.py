"""Replay 2, KV transfer vs compute: a disaggregated deployment adds a KV-cache transfer thread
beside prefill, and TTFT gets worse far beyond what moving the bytes costs. The transfer never
overlaps the prefill's communication step, because that step's native call keeps the GIL
(ctypes.PyDLL, as a binding without py::gil_scoped_release does), so every message the transfer
thread sends waits out a whole dispatch or combine before it can take the GIL back.

The built-in engine's disaggregated mode is the stack in miniature: a prefill worker that calls
a native dispatch/combine around every layer's MLP, a KV-transfer thread that sends each finished
prefill's K/V as messages, a decode worker that streams every token (the first travels with the
K/V, so TTFT = queue + prefill + KV transfer, as in P/D serving). The agent's story:

1. The acceptance criterion `ttft_p50 <= 1.05 * baseline.ttft_p50`, against the same deployment
   without the transfer (`--kv-transfer-impl none`: the decode worker reads the K/V in place),
   measured alternately in the same call (baseline_handle): contradicted, and the attribution
   says the KV-transfer phase moved most and suggests profiling its overlap with compute.
2. `profile(handle=...)` under a load shaped like the workload (load_input_len, load_output_len,
   load_concurrency), with overlap [['kv_transfer', 'dispatch|combine']]: the
   transfer was running during a dispatch/combine for almost none of its time, and the finding
   is `gil_contention`: the prefill worker held the GIL while the transfer thread sat blocked on
   it, and the holder was waiting (in the native call) rather than running Python: release the
   GIL in the native call.
3. The fix (`--comm-releases-gil`: ctypes.CDLL releases it): the same profile shows the transfer
   overlapping the communication step, and the criterion passes against the same baseline.

What a person should look at (one run here, 2 shared cores; `pytest -s` prints them):
- step 1: "TTFT p50 210 ms ... Criteria: FAIL ... vs handle serve-..., alternating: TTFT p50 +65%:
  queue -3%, prefill +2%, kv_transfer +738%; the kv_transfer phase moved most (11.22 -> 93.96 ms
  per request); next: ... profile with overlap=[['kv_transfer', 'dispatch|combine']] under a load
  shaped like this workload" (repeats' TTFT p50 210/205/215 ms against the baseline's 130/124/128);
- step 2: gil_contention: "`kv_transfer` overlapped `dispatch|combine` 4.5% of its 148 ms (running
  time) ... together 6.6 ms, where chance alone would give ~69 ms; prefill-worker held the GIL 54%
  of the window, its `dispatch|combine` ranges being open 49% of it (most often at
  NativeComm.combine) while kv-transfer sat blocked on it 54% of its `kv_transfer` time"; next:
  release the GIL in the native call (ctypes.CDLL, not PyDLL). Over four runs: overlap 4-6%, the
  holder's GIL share 0.50-0.56 against its ranges' 0.46-0.49, the waiter blocked 0.54-0.61.
  Over four more (two idle, two beside two CPU hogs, 2026-12-07): overlap 4.5-7.6%, 7-11% of
  chance; holder 0.66-0.74, waiter blocked 0.72-0.83. One CI run on a slower host (TPOT 18 ms,
  2-3 ms here) read 17%, 51% of chance, and found nothing under the old half-of-chance gate;
- step 3: the transfer overlaps a dispatch/combine 43-57% of its running time (about their share of
  the window: nothing keeps them apart any more), no finding; TTFT p50 83 ms, "Criteria: pass",
  TTFT p50 -29% against the same baseline (releasing the GIL also frees the engine's HTTP thread).
"""

import pytest
from case_study_client import agent  # noqa: F401
from conftest import call

from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

# serial: its criterion compares TTFT against a baseline; another worker's tests would be noise
pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.serial]

COMM = ["--disaggregated"]  # the default --comm-us (8000) is the episode's
HELD = ["--no-comm-releases-gil"]
RELEASED = ["--comm-releases-gil"]
# Closed loop: a prefill worker under steady load (a P/D prefill instance is busy), prompts of four
# KV blocks, few output tokens (the criterion is about the first one). 120 requests a repeat: on a
# quiet host the held GIL costs +30% TTFT p50, and with 60 the repeats' spreads (114-141 ms
# against the baseline's 106-117) left the criterion inconclusive once; 120 decided it (+30%, FAIL).
WORKLOAD = {
    "num_requests": 120,
    "input_len": 128,
    "output_len": 3,
    "max_concurrency": 6,
    "seed": 5,
    "warmup": 2,
}
CRITERION = "ttft_p50 <= 1.05 * baseline.ttft_p50"
# the cost probe's refusal says "raise time_budget_s": on a busy host (load ~18) it estimated 817 s
# for the 300 s default, one request alone taking 5.7-6.7 s; the story is the criterion, not the cost
TIME_BUDGET_S = 3600
OVERLAP = ["kv_transfer", "dispatch|combine"]


async def launch(client, *extra) -> str:
    out = await call(
        client,
        "launch_serve",
        engine="builtin",
        args={"model": "tiny", "extra_args": [*COMM, *extra]},
    )
    return out["handle"]


async def judged(client, handle: str, baseline: str) -> dict:
    """The criterion judged against the baseline, as an agent would: where the answer is
    inconclusive, once more with the remedy the answer names (more requests per repeat; twice as
    many here). CI saw it once at 120: one of the held engine's repeats read 117 ms against its
    others' 142-143 and the baseline's 102-111, straddling the 1.05x threshold."""
    workload = WORKLOAD
    for _ in range(2):
        out = await call(
            client,
            "serve_benchmark",
            handle=handle,
            baseline_handle=baseline,
            workload=workload,
            repeats=3,
            criteria=[CRITERION],
            time_budget_s=TIME_BUDGET_S,
        )
        print(
            "TTFT p50 per repeat:",
            [r["latencies_ms"]["ttft"]["median"] for r in out["repeats"]],
            "baseline:",
            [r["latencies_ms"]["ttft"]["median"] for r in out["baseline_repeats"]],
        )
        if out["criteria"]["answer"] != "inconclusive":
            return out
        assert "requests per repeat would" in out["undecided"][0], out["undecided"]
        workload = {**WORKLOAD, "num_requests": 2 * WORKLOAD["num_requests"]}
    return out


async def profiled(client, handle: str) -> dict:
    # the profile's load shaped like the workload under test: its prompts keep prefill and the transfer busy
    return await call(
        client,
        "profile",
        handle=handle,
        duration_s=3.0,
        load_concurrency=WORKLOAD["max_concurrency"],
        load_input_len=WORKLOAD["input_len"],
        load_output_len=WORKLOAD["output_len"],
        overlap=[OVERLAP],
    )


def _of_chance(stat: dict, prof: dict) -> float:
    """Both sets' time together over what chance alone would give them (1 = independent)."""
    return stat["both_ms"] * prof["window_ms"] / (stat["a_active_ms"] * stat["b_active_ms"])


async def test_kv_transfer_held_gil_then_released(agent, zoo_workspace):  # noqa: F811
    build_tiny_checkpoint(zoo_workspace / "tiny")
    baseline = await launch(agent, *HELD, "--kv-transfer-impl", "none")
    held = await launch(agent, *HELD, "--kv-transfer-impl", "bytes")

    # 1. the criterion fails, and the attribution names the KV transfer
    verdict = await judged(agent, held, baseline)
    print("held:", verdict["summary"])
    assert verdict["criteria"]["answer"] == "contradicted", verdict["summary"]
    assert "the kv_transfer phase moved most" in verdict["findings"][0], verdict["findings"]
    assert "overlap=[['kv_transfer', 'dispatch|combine']]" in verdict["findings"][0]

    # 2. the timeline: no overlap, and the GIL is why
    prof = await profiled(agent, held)
    (stat,) = prof["overlaps"]
    print(
        "held profile:",
        stat["a_overlap_fraction"],
        "of chance:",
        _of_chance(stat, prof),
        [f["message"] for f in prof["findings"]],
    )
    contention = [f for f in prof["findings"] if f["code"] == "gil_contention"]
    # the GIL witness in the message: a silent profile says which of the two witnesses fell short
    assert contention, (prof["findings"], stat, (prof["contention"] or {}).get("waits"))
    assert "release the GIL in the native call" in contention[0]["next_experiment"]

    # 3. the fix: the native call lets the GIL go
    fixed = await launch(agent, *RELEASED, "--kv-transfer-impl", "bytes")
    prof_fixed = await profiled(agent, fixed)
    (stat_fixed,) = prof_fixed["overlaps"]
    print(
        "released profile:",
        stat_fixed["a_overlap_fraction"],
        "of chance:",
        _of_chance(stat_fixed, prof_fixed),
        [f["code"] for f in prof_fixed["findings"]],
    )
    # the transfer now runs during a dispatch/combine about as often as chance gives (their running share of
    # the window: 7-20% here, lower on a loaded host), where with the GIL held it almost never did
    chance = stat_fixed["b_active_ms"] / prof_fixed["window_ms"]
    assert stat_fixed["a_overlap_fraction"] >= 0.25 * chance, (chance, stat_fixed)
    # held 4-6% and released 43-57% before the window-bounded thread table; after it 6.6-7.4% and 32%
    # over 2 s windows (4.9x, one run failed 5x), 5.7-5.8% and 39-40% over 3 s (6.8x, two runs)
    assert stat_fixed["a_overlap_fraction"] > 3 * (stat["a_overlap_fraction"] or 0), (
        stat,
        stat_fixed,
    )
    assert not [f for f in prof_fixed["findings"] if f["code"] in ("gil_contention", "no_overlap")]
    verdict_fixed = await judged(agent, fixed, baseline)
    print("released:", verdict_fixed["summary"])
    assert verdict_fixed["criteria"]["answer"] == "supported", verdict_fixed["summary"]
    for h in (baseline, held, fixed):
        await call(agent, "stop_serve", handle=h)
