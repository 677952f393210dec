"""serve_benchmark's attribution on hand-made numbers: the phase that moved is named with the next
experiment for its layer, and a latency change the engine's phases do not account for is said to
lie outside them (not pinned on whichever phase happened to move most)."""

from infra_agent.tools.serve_benchmark.judge import attribution

BASE = {"ttft_p50": 100.0, "tpot_p50": 5.0, "queue_ms": 10.0, "prefill_ms": 60.0, "decode_ms": 40.0,
        "kv_transfer_ms": 10.0, "preemptions": 0.0}


def test_the_phase_that_moved_is_named():
    cand = {**BASE, "ttft_p50": 140.0, "prefill_ms": 98.0}
    _, findings = attribution(cand, BASE, focus="ttft_p50 <= 1.05 * baseline.ttft_p50")
    assert findings[0].startswith("TTFT p50 +40%: queue +0%, prefill +63%, kv_transfer +0%")
    assert "the prefill phase moved most (60.00 -> 98.00 ms per request)" in findings[0]
    assert "next: the prefill path moved" in findings[0]


def test_a_change_outside_the_engines_phases_is_said_so():
    cand = {**BASE, "ttft_p50": 78.0, "kv_transfer_ms": 11.6, "prefill_ms": 59.0}  # -22 ms; phases +0.6 ms
    _, findings = attribution(cand, BASE, focus="ttft_p50")
    assert "the engine's phases account for +0.6 of its -22.0 ms, so the change lies outside them" in findings[0]
    assert "moved most" not in findings[0] and "HTTP/streaming threads" in findings[0]


def test_a_flat_run_names_no_phase():
    _, findings = attribution({**BASE, "ttft_p50": 101.0}, BASE, focus="ttft_p50")
    assert "none of its engine phases moved by 5% or more" in findings[0]
