"""From repeats to numbers, criteria and attribution.

Each metric is the median over repeats; its interval is the [min, max] over repeats, for
this run and for the baseline alike, so a criterion is decided only when the repeats of
both agree (`ttft_p50 <= 1.05 * baseline.ttft_p50` passes when this run's worst repeat is
within 5% of the baseline's best, fails when this run's best is over 5% above the
baseline's worst, and is inconclusive in between). Attribution compares the engine's own
per-phase times with the baseline's and names the phase that moved most, with the next
cheapest experiment for that layer: only a phase whose repeats clear the baseline's (each
median outside the other side's [min, max]) and that moved the way the latency did.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict

from ...serving.loadgen import RunResult
from .phases import PHASE_METRIC
from .schema import LATENCIES, STATS, EngineCpu, LatencyRow, PhaseChange, RepeatMetrics

_STAT_KEY = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
COUNTS = (
    "completed",
    "failed",
    "reconnected",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "goodput",
    "slo_attainment_pct",
)
PHASES = (
    "queue_ms",
    "prefill_ms",
    "decode_ms",
    "kv_transfer_ms",
    "engine_ttft_ms",
    "preemptions",
    "prefix_cache_hit_rate",
)
METRICS = tuple(f"{lat}_{s}" for lat in LATENCIES for s in STATS) + COUNTS + PHASES

NEXT_STEP = {
    "queue_ms": "requests wait for a batch slot: raise max_num_seqs or max_num_batched_tokens, or compare at a "
    "lower rate",
    "prefill_ms": "the prefill path moved: profile the prefill step (profile handle=...), or microbench its "
    "kernels (rmsnorm, paged_attention_decode, w8a8_gemm)",
    "decode_ms": "the decode path moved: profile a decode step, or microbench paged_attention_decode",
    "kv_transfer_ms": "the KV transfer moved: profile with overlap=[['kv_transfer', 'dispatch|combine']] under "
    "a load shaped like this workload (load_input_len, load_output_len, load_concurrency) to "
    "see whether it overlaps compute (a thread holding the GIL serialises them)",
    "preemptions": "the KV cache ran out of blocks: raise its size or lower max_num_seqs",
    "outside": "the path between the engine's steps and the client (its HTTP/streaming threads waiting for the "
    "GIL or a CPU, the network, the client): profile the engine under load (profile handle=...) and "
    "compare its HTTP threads' states",
}


def repeat_metrics(
    result: RunResult, phases: dict[str, float | None], engine_cpu: EngineCpu | None = None
) -> RepeatMetrics:
    """One run's numbers: the client's (the load generator's) and the engine's own (`phases`,
    and the kernel's account of its processes' CPU, `engine_cpu`)."""
    m = result.metrics
    lat = {}
    for name, dist in (
        ("ttft", m.ttft_ms),
        ("tpot", m.tpot_ms),
        ("itl", m.itl_ms),
        ("e2el", m.e2el_ms),
        ("itl_per_token", m.itl_per_token_ms),
    ):
        if dist is not None:
            lat[name] = {k: round(v, 4) for k, v in asdict(dist).items() if k != "n"}
    return RepeatMetrics(
        completed=m.completed,
        failed=m.failed,
        errors=m.errors,
        no_text_requests=m.no_text_requests,
        reconnected=m.reconnected,
        duration_s=round(m.duration_s, 4),
        request_throughput=m.request_throughput,
        output_throughput=m.output_throughput,
        total_token_throughput=m.total_token_throughput,
        goodput=m.goodput,
        slo_attainment_pct=m.slo_attainment_pct,
        latencies_ms=lat,
        phases_ms=phases,
        client_cpu_wait_ms=None
        if result.client_cpu_wait_s is None
        else round(1e3 * result.client_cpu_wait_s, 1),
        engine_cpu=engine_cpu,
    )


def flat(r: RepeatMetrics) -> dict[str, float | None]:
    """One repeat's metrics under the names criteria use."""
    out: dict[str, float | None] = {}
    for lat in LATENCIES:
        for s in STATS:
            out[f"{lat}_{s}"] = r.latencies_ms.get(lat, {}).get(_STAT_KEY[s])
    for name in COUNTS:
        out[name] = getattr(r, name)
    for name in PHASES:
        out[name] = r.phases_ms.get(name)
    return out


def aggregate(
    repeats: list[RepeatMetrics],
) -> tuple[dict[str, float | None], dict[str, list[float]]]:
    """(median over repeats, [min, max] over repeats) per metric; None where a repeat has no value."""
    rows = [flat(r) for r in repeats]
    medians, spread = {}, {}
    for name in METRICS:
        values = [row[name] for row in rows]
        if any(v is None for v in values):
            medians[name] = None
            continue
        medians[name] = statistics.median(values)
        spread[name] = [min(values), max(values)]
    return medians, spread


def latency_table(metrics: dict, spread: dict) -> list[LatencyRow]:
    return [
        LatencyRow(
            metric=lat,
            p50_range=spread.get(f"{lat}_p50"),
            **{
                s: None if metrics.get(f"{lat}_{s}") is None else round(metrics[f"{lat}_{s}"], 3)
                for s in STATS
            },
        )
        for lat in LATENCIES
    ]


# What each end-to-end latency is made of, engine-side: TTFT = queue + prefill (+ the KV hand-over
# in disaggregated serving); TPOT and ITL are decode. A change is attributed among its own parts,
# since one slow phase also stalls the others (a long prefill step delays every decode batched with it).
PARTS = {
    "ttft_p50": ("TTFT p50", ("queue_ms", "prefill_ms", "kv_transfer_ms")),
    "tpot_p50": ("TPOT p50", ("decode_ms",)),
}


def attribution(
    metrics: dict,
    base: dict,
    focus: str = "",
    spread: dict | None = None,
    base_spread: dict | None = None,
) -> tuple[list[PhaseChange], list[str]]:
    """Per-phase changes (largest first) and findings: for TTFT and TPOT, how much each moved, which
    of its phases moved most and the next cheapest experiment for that layer. A metric the criteria
    name (`focus`: their text) comes first, else the one that moved most.

    A phase is named only when it moved beyond noise (each side's median lies outside the other
    side's [min, max] over repeats: `spread`, `base_spread`) and in the direction the latency moved;
    otherwise the line says no phase moved beyond noise. Without spreads (one repeat) a side's
    interval is its single value."""
    spread, base_spread = spread or {}, base_spread or {}
    changes = {name: _change(name, base.get(name), metrics.get(name)) for name in PHASES}
    timed = sorted(
        (c for name, c in changes.items() if name in PHASE_NAMES and c.delta is not None),
        key=lambda c: -abs(c.delta),
    )
    rest = [c for c in changes.values() if c not in timed]
    if not timed:
        return rest, [
            "the engine exports no per-phase metrics (vLLM's request_*_time_seconds histograms), so no "
            "phase can be named: profile the engine instead"
        ]

    def clears_noise(name: str) -> bool:
        return beyond_noise(metrics[name], base[name], spread.get(name), base_spread.get(name))

    lines = []
    for key, (label, parts) in PARTS.items():
        b, c = base.get(key), metrics.get(key)
        moved = [changes[p] for p in parts if changes[p].delta is not None]
        if not b or c is None or not moved:
            continue
        rel = (c - b) / b
        text = f"{label} {100 * rel:+.0f}%: " + ", ".join(f"{m.phase} {_pct(m)}" for m in moved)
        named = [
            m
            for m in moved
            if m.delta * (c - b) > 0
            and abs(m.delta) >= 0.5
            and m.delta_pct is not None
            and abs(m.delta_pct) >= 5
            and clears_noise(m.phase + "_ms")
        ]  # the latency's direction, beyond noise
        explained = sum(m.delta for m in moved)
        unexplained = explained * (c - b) <= 0 or abs(explained) < abs(c - b) / 2
        if not clears_noise(key):
            text += (
                f"; {label} itself moved within noise (baseline "
                f"{_interval(base_spread.get(key), b)} ms, this run "
                f"{_interval(spread.get(key), c)} ms), so no phase is named"
            )
        elif named:
            top = max(named, key=lambda m: abs(m.delta))
            text += _named(top, spread, base_spread)
        elif abs(c - b) >= 1.0 and abs(rel) >= 0.05 and unexplained:
            text += (
                f"; the engine's phases account for {explained:+.1f} of its {c - b:+.1f} ms, "
                f"so the change lies outside them; next: {NEXT_STEP['outside']}"
            )
        else:
            text += (
                "; no phase moved beyond noise in the same direction (a phase is named when it "
                "moved by 5% or more, its repeats clear of the baseline's, the way the latency "
                "moved)"
            )
        lines.append((label.split()[0].lower() in focus, abs(rel), text))
    findings = [text for *_, text in sorted(lines, key=lambda item: (not item[0], -item[1]))]
    pre = changes["preemptions"]
    if pre.candidate and pre.candidate > (pre.baseline or 0):
        findings.append(
            f"preemptions {pre.baseline or 0:g} -> {pre.candidate:g}: {NEXT_STEP['preemptions']}"
        )
    return timed + rest, findings


PHASE_NAMES = ("queue_ms", "prefill_ms", "decode_ms", "kv_transfer_ms")


def _named(top: PhaseChange, spread: dict, base_spread: dict) -> str:
    name = top.phase + "_ms"
    if name in spread or name in base_spread:
        noise = (
            f", beyond both runs' repeats ({_interval(base_spread.get(name), top.baseline)} -> "
            f"{_interval(spread.get(name), top.candidate)})"
        )
    else:
        noise = ", one repeat a side (no spread to rule out noise)"
    return (
        f"; the {top.phase} phase moved most ({top.baseline:.2f} -> {top.candidate:.2f} ms per "
        f"request){noise}; next: {NEXT_STEP.get(name, 'profile that phase')}"
    )


def beyond_noise(
    candidate: float, baseline: float, spread: list[float] | None, base_spread: list[float] | None
) -> bool:
    """Each side's median outside the other side's [min, max] over repeats (a missing spread: one
    repeat, its interval the value itself)."""
    c_lo, c_hi = spread or (candidate, candidate)
    b_lo, b_hi = base_spread or (baseline, baseline)
    return not (c_lo <= baseline <= c_hi) and not (b_lo <= candidate <= b_hi)


def _interval(span: list[float] | None, value: float) -> str:
    return f"{span[0]:.2f}-{span[1]:.2f}" if span and span[0] != span[1] else f"{value:.2f}"


def _change(name: str, b: float | None, c: float | None) -> PhaseChange:
    delta = c - b if b is not None and c is not None else None
    pct = 100.0 * delta / b if delta is not None and b else None
    phase = name.removesuffix("_ms")
    return PhaseChange(
        phase=phase, metric=PHASE_METRIC[phase], baseline=b, candidate=c, delta=delta, delta_pct=pct
    )


def _pct(c: PhaseChange) -> str:
    return f"{c.delta_pct:+.0f}%" if c.delta_pct is not None else f"{c.delta:+.2f} ms"
