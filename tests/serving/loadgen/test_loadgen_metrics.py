"""The metric definitions, on records whose times are known exactly (hand-computed)."""

from __future__ import annotations

import math

import pytest

from infra_agent.serving.loadgen import Arrivals, RequestRecord, compute


def rec(index, scheduled, content, last, tokens, counts=None, error=None, warmup=False):
    return RequestRecord(
        index=index,
        scheduled_s=scheduled,
        sent_s=scheduled,
        prompt_tokens=10,
        content_times_s=list(content),
        content_tokens=list(counts or [None] * len(content)),
        last_chunk_s=last,
        output_tokens=tokens,
        error=error,
        is_warmup=warmup,
    )


def test_ttft_tpot_itl_e2el_as_defined():
    # request 0: scheduled at 1.0; content chunks at 1.2 (2 tokens), 1.5 (1), 1.6 (2); usage-only chunk at 1.7
    r0 = rec(0, 1.0, [1.2, 1.5, 1.6], 1.7, tokens=5, counts=[2, 1, 2])
    # request 1: scheduled at 2.0; one content chunk at 2.1 carrying 4 tokens, end 2.1
    r1 = rec(1, 2.0, [2.1], 2.1, tokens=4, counts=[4])
    m = compute([r0, r1], duration_s=2.0)
    assert m.completed == 2 and m.failed == 0
    assert m.ttft_ms.median == pytest.approx((200 + 100) / 2)
    # TPOT = (E2EL - TTFT) / (tokens - tokens of the first chunk): r0 (700-200)/(5-2) ms; r1
    # none (every token in its first chunk: no time per token seen, not 0 ms; issue 36)
    assert m.tpot_ms.n == 1 and m.tpot_ms.mean == pytest.approx(500 / 3)
    assert m.e2el_ms.mean == pytest.approx((700 + 100) / 2)
    # ITL per chunk: r0's gaps 300, 100 ms; r1 has none
    assert m.itl_ms.n == 2 and m.itl_ms.mean == pytest.approx(200)
    # ITL per token: 300 ms over 1 token, 100 ms over 2 tokens -> [300, 50, 50]
    assert m.itl_per_token_ms.n == 3 and m.itl_per_token_ms.mean == pytest.approx(400 / 3)
    assert m.output_throughput == pytest.approx(9 / 2.0)
    assert m.request_throughput == pytest.approx(1.0)
    assert m.input_throughput == pytest.approx(20 / 2.0)


def test_tpot_without_per_chunk_counts_is_vllms_rule():
    """No per-chunk usage: the first chunk is taken for one token, (E2EL - TTFT) / (tokens - 1)."""
    m = compute([rec(0, 1.0, [1.2, 1.5, 1.6], 1.6, tokens=5)], duration_s=1.0)
    assert m.tpot_ms.mean == pytest.approx(400 / 4)


def test_single_token_request_has_no_tpot_and_warmup_is_excluded():
    one = rec(0, 0.0, [0.05], 0.05, tokens=1)
    warm = rec(-1, 0.0, [9.0], 9.0, tokens=3, warmup=True)
    m = compute([one, warm], duration_s=1.0)
    assert m.completed == 1 and m.tpot_ms is None
    assert m.ttft_ms.median == pytest.approx(50)


def test_failures_counted_and_grouped():
    bad = rec(0, 0.0, [], math.nan, tokens=0, error="HTTP 500: boom\ntrace")
    empty = rec(1, 0.0, [], math.nan, tokens=0)
    good = rec(2, 0.0, [0.1, 0.2], 0.2, tokens=2)
    m = compute([bad, empty, good], duration_s=1.0)
    assert (m.completed, m.failed) == (1, 2)
    assert m.errors == {"HTTP 500: boom": 1, "no content received": 1}


def test_goodput_and_slo_attainment():
    fast = rec(0, 0.0, [0.1, 0.2], 0.2, tokens=2)  # ttft 100, tpot 100, e2el 200
    slow = rec(1, 0.0, [0.5, 0.6], 0.6, tokens=2)  # ttft 500
    m = compute([fast, slow], duration_s=2.0, slos_ms={"ttft": 200, "tpot": 150})
    assert m.goodput == pytest.approx(0.5) and m.slo_attainment_pct == pytest.approx(50.0)
    with pytest.raises(ValueError, match="unknown SLO"):
        compute([fast], 1.0, slos_ms={"latency": 1})


def test_per_token_itl_absent_without_counts():
    m = compute([rec(0, 0.0, [0.1, 0.2, 0.4], 0.4, tokens=3)], duration_s=1.0)
    assert m.itl_per_token_ms is None and m.itl_ms.n == 2


def test_gamma_arrivals_mean_and_cv():
    n, rate = 4000, 50.0
    for burstiness in (1.0, 4.0, 0.5):
        off = Arrivals(rate=rate, burstiness=burstiness, seed=7).offsets_s(n)
        gaps = [b - a for a, b in zip(off, off[1:], strict=False)]
        mean = sum(gaps) / len(gaps)
        cv = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5 / mean
        assert mean == pytest.approx(1 / rate, rel=0.06)
        assert cv == pytest.approx(1 / burstiness**0.5, rel=0.08)
    assert Arrivals(rate=2.0, seed=3).offsets_s(5) == Arrivals(rate=2.0, seed=3).offsets_s(5)
    assert Arrivals().offsets_s(3) == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        Arrivals(rate=0)
    with pytest.raises(ValueError):
        Arrivals(max_concurrency=0)
