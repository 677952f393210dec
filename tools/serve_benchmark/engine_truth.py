"""The harness checks its own numbers: the client's latencies against the engine's own.

Any engine that exports vLLM's histograms (vLLM, the built-in engine) says how long it took
to produce each first token (`vllm:time_to_first_token_seconds`) and the gap between
consecutive tokens (`vllm:inter_token_latency_seconds`). Scraped before and after a repeat,
the histograms' deltas give the engine-side TTFT p50 of that repeat, and the engine's mean
inter-token gap. A client TTFT far above the engine's, or client chunks arriving far closer
together than the engine made the tokens, is time spent between the engine and the client:
a socket option (Nagle holding small writes for the peer's delayed ACK), streaming or
detokenisation holding text back, the client itself, or the sandbox bridge.

A histogram gives a quantile only to within its bucket: the engine's p50 is known to lie in
[low, high] (two adjacent bucket edges). The gap is measured from `high`, so bucket
resolution can never make a finding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TTFT_HISTOGRAM = "vllm:time_to_first_token_seconds"
ITL_HISTOGRAM = "vllm:inter_token_latency_seconds"

# Client TTFT p50 may exceed the top of the engine's p50 bucket by this much before a finding: the
# request's HTTP parse happens before the engine's arrival time. Measured on an idle host (issue 21,
# 24 requests x 16 tokens): TCP_NODELAY on, client 7.5-10 ms against an engine p50 of 8-9 ms (bucket
# top 10 ms: no gap); off, 43-44 ms (a 33 ms gap, Linux's 40 ms delayed ACK). bench/engine_client_gap.py
# at load 4 on 2 cores, 1 in flight: on, 13.9 ms against a bucket top of 5 (8.9 ms: no finding);
# off, 49 ms (44 ms). At 4 in flight the client's TTFT was ~3x the engine's either way (61 ms, top
# 20), and at load 8-10 the gap was 37-80 ms at 1 in flight: the engine's HTTP thread waiting for
# the GIL and a CPU, a real gap the finding names (its layers include it), not a false one.
GAP_FLOOR_MS = 10.0
GAP_RATIO = 0.5  # ... or this fraction of the engine's TTFT p50 (its bucket top), if larger
# Client chunks closer together than this fraction of the engine's mean inter-token gap are a
# burst: the engine made the tokens apart, something between held them and let them go at once.
# Measured: client ITL p50 0.9-1.5x the engine's mean with TCP_NODELAY (load 4 and 8-10 alike);
# through the stall 0.02x (0.07 ms against 3.6 ms) at 1 in flight and 0.1x at 4 (load 4).
# The engine's mean alone is no measure of its typical gap: one long step (a 2 s prefill chunk)
# stalls every stream in flight, and a few such gaps pull the mean far above the median (measured:
# the built-in engine at --prefill-delay-ms 2000, 8 requests of 32 -> 8 tokens at 2 in flight:
# client ITL p50 2.4-2.5 ms, the engine's mean gap 65-130 ms, its p50 bucket 1-5 ms: a stream read
# as it came, flagged as a burst and measured again). So the client's p50 must also lie below
# this fraction of the top of the engine's own p50 bucket: a median the engine's p50 may match
# is no burst.
BURST_RATIO = 0.25
MIN_ENGINE_ITL_MS = 0.5  # below this the engine's gaps are too short to tell a burst from a stream
# A client can read tokens late, never early: its TPOT mean below this fraction of the engine's own
# mean inter-token gap is a count the client got wrong (tokens it divided by that it never saw
# apart). Measured (issue 36, the tests' tiny checkpoint, 40 x 32->32): 0.94-1.10 once the first
# chunk's tokens are counted; 0.71-0.83 with the first chunk counted as one token. Requests of
# different lengths weigh TPOT's per-request mean and the engine's per-token mean differently,
# hence the margin.
TPOT_LOW_RATIO = 0.85
# ... and a client that read late reads TPOT low too: a first chunk read late is read together with
# the tokens that came after it, so the request's span shrinks while its token count does not.
# Below this fraction of the engine's mean gap, where the load generator's own CPU wait could have
# held the first chunks back by the whole shortfall, the TPOT measured the host. Measured beside two
# CPU hogs (tests/serving/tools/test_serve_tpot_truth.py, 1 in flight, engine gaps 0.6-1.4 ms): the
# load generator waited 12-14% of its runs and read 0.91-1.01x the engine's mean, a minimal client
# 0.91-0.99x; on an idle host both read 0.94-1.10x.
TPOT_LATE_RATIO = 0.93
# The load generator waiting for a CPU this share of a run's duration (the kernel's account of
# its thread) is starved: every timestamp it takes can be that late. Measured on 2 cores against
# a sandboxed vLLM (4 in flight, 1 s runs): 1-3% on an idle host and 3-13% with the suite's
# other work; 30-95% when the engine's session shared the CPU equally with the server's, and
# then every response arrived in one burst (TTFT ~240 ms against vLLM's own 15 ms).
STARVED_SHARE = 0.25
CLIENT_STARVED = "client_starved"  # its finding code: read by the eval's void rule, sweep_serve
CACHE_SPREAD = 0.1  # prefix-cache hit rates of repeats this far apart (absolute, 0-1) differ


@dataclass(frozen=True)
class Quantile:
    """A quantile from a histogram: it lies in [low_ms, high_ms]; estimate_ms interpolates
    linearly inside the bucket (Prometheus' histogram_quantile rule)."""

    low_ms: float
    high_ms: float
    estimate_ms: float


def _buckets(scrape: dict[str, float], name: str) -> list[tuple[float, float]]:
    """(upper edge s, cumulative count) of a histogram in a phases.parse() scrape, by edge."""
    prefix = f'{name}_bucket{{le="'
    rows = [
        (float(key[len(prefix) : -2]), value)
        for key, value in scrape.items()
        if key.startswith(prefix)
    ]
    return sorted(rows)


def histogram_quantile(
    before: dict[str, float], after: dict[str, float], name: str, q: float
) -> Quantile | None:
    """The q-quantile of the observations made between two scrapes; None without any."""
    old = dict(_buckets(before, name))
    delta = [(edge, count - old.get(edge, 0.0)) for edge, count in _buckets(after, name)]
    if not delta or delta[-1][1] <= 0:
        return None
    rank, low, below = q * delta[-1][1], 0.0, 0.0
    for edge, cumulative in delta:
        if cumulative >= rank:
            if math.isinf(edge):  # above the last finite edge: known only to be over it
                return Quantile(1e3 * low, math.inf, 1e3 * low)
            inside = cumulative - below
            fraction = (rank - below) / inside if inside else 1.0
            return Quantile(1e3 * low, 1e3 * edge, 1e3 * (low + fraction * (edge - low)))
        low, below = edge, cumulative
    return None


def engine_side(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Per repeat: the engine's TTFT p50 (estimate and its bucket), its mean inter-token gap and
    the top of the bucket its inter-token p50 lies in, ms."""
    ttft = histogram_quantile(before, after, TTFT_HISTOGRAM, 0.5)
    itl = histogram_quantile(before, after, ITL_HISTOGRAM, 0.5)
    total = after.get(ITL_HISTOGRAM + "_sum", 0.0) - before.get(ITL_HISTOGRAM + "_sum", 0.0)
    count = after.get(ITL_HISTOGRAM + "_count", 0.0) - before.get(ITL_HISTOGRAM + "_count", 0.0)
    return {
        "engine_ttft_p50_ms": ttft and ttft.estimate_ms,
        "engine_ttft_p50_low_ms": ttft and ttft.low_ms,
        "engine_ttft_p50_high_ms": ttft and ttft.high_ms,
        "engine_itl_mean_ms": 1e3 * total / count if count > 0 else None,
        "engine_itl_p50_high_ms": itl and itl.high_ms,
    }


def ttft_gap_ms(client_ttft_p50_ms: float, engine: dict[str, float | None]) -> float | None:
    """How far the client's TTFT p50 lies above the top of the engine's p50 bucket, ms."""
    high = engine.get("engine_ttft_p50_high_ms")
    if high is None or math.isinf(high):
        return None
    return client_ttft_p50_ms - high


def ttft_gap_is_large(gap_ms: float, engine: dict[str, float | None]) -> bool:
    return gap_ms > max(GAP_FLOOR_MS, GAP_RATIO * engine["engine_ttft_p50_high_ms"])


def is_burst(client_itl_p50_ms: float, engine: dict[str, float | None]) -> bool:
    """The client's chunks far closer together than the engine made its tokens: below
    BURST_RATIO of the engine's mean gap and of the top of its p50 bucket (where the scrape had
    one: rows recorded before it have the mean alone)."""
    itl = engine.get("engine_itl_mean_ms")
    if itl is None or itl < MIN_ENGINE_ITL_MS or client_itl_p50_ms >= BURST_RATIO * itl:
        return False
    p50_high = engine.get("engine_itl_p50_high_ms")
    return p50_high is None or client_itl_p50_ms < BURST_RATIO * p50_high


LAYERS = (
    "a server socket without TCP_NODELAY (Nagle holds each small write until the client's delayed "
    "ACK, ~40 ms), streaming or detokenisation holding text back, the engine's HTTP thread waiting for "
    "the GIL or a CPU while its engine steps (a loaded host, or many requests parsed and tokenised "
    "at once), the client (a busy process, a new connection per request), or the sandbox bridge"
)


def disagreement(r) -> str | None:
    """Why one repeat's (RepeatMetrics) client numbers are not the engine's, in words: the load
    generator starved of a CPU, its TPOT read low by as much as its CPU wait could take off, the
    client's TTFT far above the engine's own, or tokens arriving in a burst; None when they agree or
    the engine keeps no histograms to check against."""
    share = _starved_share(r)
    if share is not None and share > STARVED_SHARE:
        return f"the load generator waited {100 * share:.0f}% of the run for a CPU"
    late = _late_tpot_row(r)
    if late is not None:
        return (
            f"TPOT mean {late.client_ms:.3g} ms, {late.client_ms / late.engine_ms:.2f}x the engine's "
            f"mean gap, while the load generator waited {late.wait_ms:.0f} ms for a CPU"
        )
    gap = _ttft_gap_row(r)
    if gap is not None and ttft_gap_is_large(gap[1], gap[2]):
        client, gap_ms, engine = gap
        return (
            f"client TTFT p50 {client:.1f} ms, {gap_ms:.1f} ms above the engine's own "
            f"(its p50 bucket {engine['engine_ttft_p50_low_ms']:g}-{engine['engine_ttft_p50_high_ms']:g} ms)"
        )
    burst = _burst_row(r)
    if burst is not None and is_burst(*burst):
        client, engine = burst
        return (
            f"tokens arrived in bursts (client ITL p50 {client:.3g} ms, the engine's mean gap "
            f"{engine['engine_itl_mean_ms']:.3g} ms)"
        )
    return None


def remeasured_finding(r) -> str:
    """repeat_remeasured, for a RemeasuredRepeat."""
    whose = "the baseline's" if r.side == "baseline" else "this engine's"
    head = f"repeat_remeasured: {whose} repeat {r.repeat} disagreed with the engine's own numbers ({r.why})"
    if r.agreed:
        return (
            f"{head}; measured again with prompts of its own it agreed, and took the first "
            "measurement's place (that one is in remeasured[].set_aside): a moment of this host, "
            "not the engine"
        )
    return (
        f"{head}; measured again, it disagreed again ({disagreement(r.set_aside)}): the first "
        "measurement kept its place, so this side's interval holds time the engine's own count "
        "does not see (the client, the path between, or the engine's own HTTP front end), not the "
        f"engine's work alone. Next: look for other load on this host, then the layers: {LAYERS}"
    )


def findings(
    repeats: list, reuse_prompts: bool, dataset: str = "random", whose: str = ""
) -> list[str]:
    """client_starved, client_engine_gap and cache_warm_repeats over a run's repeats
    (RepeatMetrics); `whose` (e.g. "the baseline engine") names the side when it is not the
    engine benchmarked."""
    texts = (
        _starved(repeats),
        _ttft_gap(repeats),
        _burst(repeats),
        _late_tpot(repeats) or _tpot_low(repeats),
        _cache_warm(repeats, reuse_prompts),
        _cache_warm_from_before(repeats, reuse_prompts, dataset),
    )
    if whose:  # "code: text" stays greppable by its code
        return [text.replace(": ", f": on {whose}, ", 1) for text in texts if text]
    return [text for text in texts if text]


def _majority(flags: list[bool]) -> bool:
    return sum(flags) * 2 > len(flags)


def _starved_share(r) -> float | None:
    """The share of a run's duration the load generator waited for a CPU; None where unknown."""
    if r.client_cpu_wait_ms is None or r.duration_s <= 0:
        return None
    return r.client_cpu_wait_ms / (1e3 * r.duration_s)


def _ttft_gap_row(r) -> tuple[float, float, dict] | None:
    """(client TTFT p50, its gap above the engine's p50 bucket top, the engine's side), ms."""
    client = r.latencies_ms.get("ttft", {}).get("median")
    gap = None if client is None else ttft_gap_ms(client, r.phases_ms)
    return None if gap is None else (client, gap, r.phases_ms)


def _burst_row(r) -> tuple[float, dict] | None:
    """(client ITL p50 ms, the engine's side) where the engine measured its inter-token gaps."""
    client = r.latencies_ms.get("itl", {}).get("median")
    if client is None or r.phases_ms.get("engine_itl_mean_ms") is None:
        return None
    return client, r.phases_ms


def _starved(repeats: list) -> str | None:
    rows = [(share, r) for r in repeats if (share := _starved_share(r)) is not None]
    if not rows or not _majority([share > STARVED_SHARE for share, _ in rows]):
        return None
    share, r = sorted(rows, key=lambda row: row[0])[len(rows) // 2]
    return (
        f"{CLIENT_STARVED}: the load generator waited {r.client_cpu_wait_ms:.0f} ms for a CPU during "
        f"a {1e3 * r.duration_s:.0f} ms run ({100 * share:.0f}%, median repeat of {len(rows)}): it "
        "read the engine's output late, so TTFT, TPOT and ITL include that wait (responses read in "
        "bursts) and measure this host's contention, not the engine. Next: lower the other load "
        "on this host, give the engine fewer threads or cores than the host has, or benchmark on "
        "a host with cores to spare"
    )


def _ttft_gap(repeats: list) -> str | None:
    rows = [row for r in repeats if (row := _ttft_gap_row(r)) is not None]
    if not rows or not _majority([ttft_gap_is_large(gap, engine) for _, gap, engine in rows]):
        return None
    client, gap, engine = sorted(rows, key=lambda row: row[1])[len(rows) // 2]
    return (
        f"client_engine_gap: the client's TTFT p50 {client:.1f} ms lies {gap:.1f} ms above the engine's own "
        f"(p50 {engine['engine_ttft_p50_ms']:.1f} ms, in its histogram bucket "
        f"{engine['engine_ttft_p50_low_ms']:g}-{engine['engine_ttft_p50_high_ms']:g} ms; median repeat of "
        f"{len(rows)}): the time is spent outside the engine's own count, before its arrival stamp (the HTTP "
        f"front end parsing and tokenising the request) or between its first token and the client: {LAYERS}. "
        "Next: compare with a client on the engine's host, or check the server's socket options"
    )


def _burst(repeats: list) -> str | None:
    rows = [row for r in repeats if (row := _burst_row(r)) is not None]
    if not rows or not _majority([is_burst(client, engine) for client, engine in rows]):
        return None
    client, engine = sorted(rows, key=lambda row: row[0])[len(rows) // 2]
    return (
        f"client_engine_gap: tokens reach the client in bursts: its ITL p50 is {client:.3g} ms while the "
        f"engine made them {engine['engine_itl_mean_ms']:.3g} ms apart on average (median repeat of "
        f"{len(rows)}), so TPOT and ITL here measure the delivery, not the decode: something holds text "
        f"back: {LAYERS}"
    )


def _tpot_row(r) -> tuple[float, float] | None:
    """(client TPOT mean, the engine's mean inter-token gap), ms, where both were measured."""
    client = r.latencies_ms.get("tpot", {}).get("mean")
    engine = r.phases_ms.get("engine_itl_mean_ms")
    if client is None or engine is None or engine < MIN_ENGINE_ITL_MS:
        return None
    return client, engine


@dataclass(frozen=True)
class LateTpot:
    """A repeat whose client TPOT mean lies below TPOT_LATE_RATIO of the engine's mean gap, by no
    more than the load generator's CPU wait could take off its requests' spans (ms)."""

    client_ms: float  # the client's TPOT mean
    engine_ms: float  # the engine's mean inter-token gap
    shortfall_ms: float  # (engine - client) x the tokens after each request's first chunk, summed
    wait_ms: float  # the load generator's CPU wait over the run
    in_flight: float  # requests in flight on average (Little: request rate x mean E2EL)


def _late_tpot_row(r) -> LateTpot | None:
    """Each ms the load generator waits for a CPU can hold back the reads of every request in
    flight, so its wait x the requests in flight bounds how much its late first reads took off the
    requests' spans. A TPOT read low by no more than that measured the host's contention."""
    row = _tpot_row(r)
    e2el = r.latencies_ms.get("e2el", {}).get("mean")
    if row is None or r.client_cpu_wait_ms is None or e2el is None:
        return None
    client, engine = row
    if client >= TPOT_LATE_RATIO * engine:
        return None
    tokens_after_first = r.output_throughput * r.duration_s - r.completed
    shortfall = (engine - client) * tokens_after_first
    in_flight = max(1.0, r.request_throughput * e2el / 1e3)
    if r.client_cpu_wait_ms * in_flight < shortfall:
        return None
    return LateTpot(client, engine, shortfall, r.client_cpu_wait_ms, in_flight)


def _late_tpot(repeats: list) -> str | None:
    rows = [row for r in repeats if (row := _late_tpot_row(r)) is not None]
    if not rows or 2 * len(rows) <= len(repeats):  # in most repeats, as every check here
        return None
    late = sorted(rows, key=lambda row: row.client_ms / row.engine_ms)[len(rows) // 2]
    return (
        f"client_engine_gap: the client's TPOT mean {late.client_ms:.3g} ms is "
        f"{late.client_ms / late.engine_ms:.2f}x the engine's own mean inter-token gap "
        f"{late.engine_ms:.3g} ms (median of {len(rows)} repeats reading low), and the load "
        f"generator waited {late.wait_ms:.0f} ms for a CPU during the run with "
        f"{late.in_flight:.1f} requests in flight, enough to account for the whole shortfall "
        f"({late.shortfall_ms:.0f} ms of the requests' spans): a first chunk read late is read "
        "together with the tokens after it, so the span shrinks and TPOT reads low. It measured "
        "this host's contention, not the decode: judge decode speed by the engine's histogram "
        "(phases_ms.engine_itl_mean_ms), or lower the other load on this host"
    )


def _tpot_low(repeats: list) -> str | None:
    rows = [row for r in repeats if (row := _tpot_row(r)) is not None]
    if not rows or not _majority([client < TPOT_LOW_RATIO * engine for client, engine in rows]):
        return None
    client, engine = sorted(rows, key=lambda row: row[0] / row[1])[len(rows) // 2]
    return (
        f"client_engine_gap: the client's TPOT mean {client:.3g} ms is {client / engine:.2f}x the "
        f"engine's own mean inter-token gap {engine:.3g} ms (median repeat of {len(rows)}): a client "
        "can read tokens late but not early, so its TPOT divides by tokens it never saw arrive apart "
        "(several tokens in one chunk the engine did not count per chunk, or an output-token count "
        "above what streamed). Do not judge decode speed by this TPOT; compare the engine's "
        "histogram (phases_ms.engine_itl_mean_ms), and ask the engine for per-chunk usage"
    )


def _cache_warm(repeats: list, reuse_prompts: bool) -> str | None:
    rates = [r.phases_ms.get("prefix_cache_hit_rate") for r in repeats]
    known = [x for x in rates if x is not None]
    if len(known) < 2 or max(known) - min(known) <= CACHE_SPREAD:
        return None
    listing = ", ".join("-" if x is None else f"{x:.2f}" for x in rates)
    why = (
        "reuse_prompts sends the same prompts every repeat, so later repeats find them cached"
        if reuse_prompts
        else "each repeat sent prompts of its own, so the cache held something else: "
        "earlier calls' prompts, shared prefixes, or warm-up requests"
    )
    return (
        f"cache_warm_repeats: the prefix-cache hit rate differs between repeats ({listing}): {why}; the "
        "median over repeats mixes cold and warm measurements. Compare repeats with equal hit rates, "
        "or restart the engine (or turn prefix caching off) for cold numbers"
    )


def _cache_warm_from_before(repeats: list, reuse_prompts: bool, dataset: str) -> str | None:
    """Random prompts share no prefix, so a hit in every repeat means the engine had seen them: an
    earlier call on this engine with the same seed sent the same (seed, repeat) prompts."""
    rates = [r.phases_ms.get("prefix_cache_hit_rate") for r in repeats]
    if (
        reuse_prompts
        or dataset != "random"
        or not rates
        or any(x is None or x <= CACHE_SPREAD for x in rates)
    ):
        return None
    listing = ", ".join(f"{x:.2f}" for x in rates)
    return (
        f"cache_warm_repeats: every repeat found its random prompts in the prefix cache ({listing}): an "
        "earlier call on this engine sent the same prompts (same seed); change workload.seed, or restart "
        "the engine, for cold numbers"
    )
