"""Serving metrics from per-request records, as `vllm bench serve` defines them.

Pure functions over timestamps; no HTTP. The definitions (also in docs/serving.md and in
every result, so a number is never read under the wrong rule):

- **TTFT**: first chunk carrying generated content (non-empty text or delta content)
  minus the request's *scheduled* send time. A role-only first chat chunk does not
  count (vLLM counts it: vllm#15106; SGLang does not). The rule is `TTFT_RULE`. A
  request that succeeds with tokens that decode to no text at all (EOS at once, special
  tokens) falls back to vLLM's point, the first chunk with choices, and is counted in
  `no_text_requests`.
- **ITL per chunk**: the gap between consecutive content chunks after the first (a
  multi-token chunk is one sample). **ITL per token**: each such gap divided evenly
  over the tokens that chunk carried, when the engine reports per-chunk token counts
  (`continuous_usage_stats`); absent otherwise (vllm#27485).
- **E2EL**: last chunk with choices (the one that carries the finish reason; not the
  usage-only chunk after it) minus scheduled send time, as vLLM's latency.
- **TPOT** per request: (E2EL - TTFT) / (output tokens - tokens of the first content chunk),
  only for requests with more than one output token; its mean/median are over requests, not
  tokens. The first chunk's tokens are known when the engine reports usage per chunk
  (`continuous_usage_stats`); else 1, vLLM's rule. Why not always 1: an engine's detokeniser
  holds back tokens that end in part of a character, and they reach the client with the first
  text, so the time from the first to the last chunk spans fewer gaps than output tokens - 1
  (issue 36: the tests' tiny checkpoint sent ~2 tokens in its first chunk, max 5; TPOT read
  0.97x the engine's own mean inter-token latency, 1.00x counted so).
- **Output tokens**: the engine's `usage.completion_tokens`; else a re-tokenisation of
  the text (flagged in `output_tokens_source`).
- **Goodput**: requests that met every given SLO (ms) per second of the run; SLO
  attainment is their share of completed requests, in percent.
- **Reconnected**: requests sent a second time on a fresh connection because the server closed
  the idle keep-alive connection they first went out on before answering (the engine never saw
  that send); their latencies start at the first send.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

TTFT_RULE = "first chunk with non-empty generated text (a role-only first chunk does not count)"
SLO_METRICS = ("ttft", "tpot", "e2el")  # the names goodput SLOs take, values in ms


@dataclass
class RequestRecord:
    """What the client saw of one request. Times are seconds on one monotonic clock."""

    index: int
    scheduled_s: float  # when the arrival process said to send it: every latency starts here
    sent_s: float = math.nan  # when it actually left (after any client-side wait)
    prompt_tokens: int = 0  # as the dataset built it
    content_times_s: list[float] = field(default_factory=list)  # arrival of each content chunk
    content_tokens: list[int | None] = field(
        default_factory=list
    )  # tokens per content chunk, if reported
    last_chunk_s: float = math.nan  # arrival of the last chunk with choices (else of any chunk)
    output_tokens: int = 0
    output_tokens_source: str = "usage"  # "usage" | "retokenized" | "chunks"
    usage_prompt_tokens: int | None = None
    text: str = ""
    first_choice_s: float | None = None  # first chunk with any choices (vLLM's TTFT point)
    no_text: bool = False  # succeeded but streamed no visible text: TTFT taken at first_choice_s
    error: str | None = None
    is_warmup: bool = False
    # sent a second time, on a fresh connection: the server closed the reused one it first went out
    # on before any answer (an idle keep-alive connection closed as the request arrived)
    reconnected: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.content_times_s)

    @property
    def ttft_s(self) -> float:
        return self.content_times_s[0] - self.scheduled_s

    @property
    def e2el_s(self) -> float:
        return self.last_chunk_s - self.scheduled_s

    @property
    def first_chunk_tokens(self) -> int:
        """Tokens the first content chunk carried (per-chunk usage); 1 when not reported."""
        first = self.content_tokens[0] if self.content_tokens else None
        return first if first is not None and first >= 1 else 1

    @property
    def tpot_s(self) -> float | None:
        if self.output_tokens <= 1:
            return None
        decoded = self.output_tokens - self.first_chunk_tokens  # tokens after the first chunk
        if decoded < 1:
            return None  # every token came in the first chunk: no time per token to see
        return (self.e2el_s - self.ttft_s) / decoded

    @property
    def client_wait_s(self) -> float:
        """Time between the scheduled send and the actual send (client-side queueing)."""
        return self.sent_s - self.scheduled_s

    def itl_per_chunk_s(self) -> list[float]:
        t = self.content_times_s
        return [b - a for a, b in zip(t, t[1:], strict=False)]

    def itl_per_token_s(self) -> list[float] | None:
        """Each gap spread evenly over the tokens its chunk carried; None without counts."""
        if not self.content_tokens or any(c is None for c in self.content_tokens):
            return None
        counts = self.content_tokens[1:]
        out: list[float] = []
        for gap, n in zip(self.itl_per_chunk_s(), counts, strict=True):
            if n > 0:
                out.extend([gap / n] * n)
        return out


@dataclass
class Distribution:
    """Summary of one latency, in milliseconds."""

    mean: float
    median: float
    std: float
    p90: float
    p99: float
    n: int

    @classmethod
    def of_seconds(cls, values: list[float]) -> Distribution | None:
        if not values:
            return None
        ms = np.asarray(values, dtype=float) * 1e3
        return cls(
            mean=float(ms.mean()),
            median=float(np.median(ms)),
            std=float(ms.std()),
            p90=float(np.percentile(ms, 90)),
            p99=float(np.percentile(ms, 99)),
            n=int(ms.size),
        )


@dataclass
class Metrics:
    completed: int
    failed: int
    duration_s: float
    request_throughput: float  # completed requests / s
    input_throughput: float  # prompt tokens / s
    output_throughput: float  # output tokens / s
    total_token_throughput: float
    ttft_ms: Distribution | None
    tpot_ms: Distribution | None
    itl_ms: Distribution | None  # per chunk
    itl_per_token_ms: (
        Distribution | None
    )  # per token, when every request reported chunk token counts
    e2el_ms: Distribution | None
    client_wait_ms: Distribution | None
    goodput: float | None  # good requests / s, when SLOs are given
    slo_attainment_pct: float | None
    output_tokens_source: (
        str  # "usage" if every request's count came from the engine, else what did not
    )
    ttft_rule: str = TTFT_RULE
    errors: dict[str, int] = field(default_factory=dict)  # error text (first line) -> count
    no_text_requests: int = (
        0  # completed without visible text; their TTFT is at the first choices chunk
    )
    reconnected: int = 0  # requests sent again on a fresh connection (RequestRecord.reconnected)


def meets_slos(rec: RequestRecord, slos_ms: dict[str, float]) -> bool:
    values = {"ttft": rec.ttft_s, "tpot": rec.tpot_s, "e2el": rec.e2el_s}
    for name, limit_ms in slos_ms.items():
        value = values[name]
        if value is not None and value * 1e3 > limit_ms:
            return False
    return True


def compute(
    records: list[RequestRecord], duration_s: float, slos_ms: dict[str, float] | None = None
) -> Metrics:
    """Metrics over the measured (non-warm-up) requests of one run of `duration_s` seconds."""
    unknown = sorted(set(slos_ms or {}) - set(SLO_METRICS))
    if unknown:
        raise ValueError(
            f"unknown SLO metric(s) {unknown}; use {', '.join(SLO_METRICS)} (values in ms)"
        )
    measured = [r for r in records if not r.is_warmup]
    done = [r for r in measured if r.ok]
    errors: dict[str, int] = {}
    for r in measured:
        if not r.ok:
            key = (r.error or "no content received").splitlines()[0][:200]
            errors[key] = errors.get(key, 0) + 1
    out_tokens = sum(r.output_tokens for r in done)
    in_tokens = sum(
        r.usage_prompt_tokens if r.usage_prompt_tokens is not None else r.prompt_tokens
        for r in done
    )
    per_token = [r.itl_per_token_s() for r in done]
    sources = sorted({r.output_tokens_source for r in done})
    good = [r for r in done if meets_slos(r, slos_ms)] if slos_ms else None

    def rate(count: float) -> float:
        return count / duration_s if duration_s > 0 else 0.0

    return Metrics(
        completed=len(done),
        failed=len(measured) - len(done),
        duration_s=duration_s,
        request_throughput=rate(len(done)),
        input_throughput=rate(in_tokens),
        output_throughput=rate(out_tokens),
        total_token_throughput=rate(in_tokens + out_tokens),
        ttft_ms=Distribution.of_seconds([r.ttft_s for r in done]),
        tpot_ms=Distribution.of_seconds([t for r in done if (t := r.tpot_s) is not None]),
        itl_ms=Distribution.of_seconds([g for r in done for g in r.itl_per_chunk_s()]),
        itl_per_token_ms=(
            Distribution.of_seconds([g for gaps in per_token for g in gaps])
            if per_token and all(p is not None for p in per_token)
            else None
        ),
        e2el_ms=Distribution.of_seconds([r.e2el_s for r in done]),
        client_wait_ms=Distribution.of_seconds(
            [r.client_wait_s for r in done if not math.isnan(r.sent_s)]
        ),
        goodput=rate(len(good)) if good is not None else None,
        slo_attainment_pct=(100.0 * len(good) / len(done) if done else 0.0)
        if good is not None
        else None,
        output_tokens_source=sources[0] if len(sources) == 1 else "mixed: " + ", ".join(sources),
        errors=errors,
        no_text_requests=sum(r.no_text for r in done),
        reconnected=sum(r.reconnected for r in measured),
    )
