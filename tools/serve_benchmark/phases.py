"""Engine-side phase times from two scrapes of an engine's Prometheus /metrics.

Per-request histograms (vLLM's names; the built-in engine uses them too) give, over a
benchmark window, the mean time per request of each phase: sum delta / count delta.
Counters give preemptions and the prefix-cache hit rate over the window. The same
logic serves vLLM, the built-in engine and any engine that exports these names; an
engine without them has no attribution, and the report says so.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

# phase -> histogram (mean seconds per request over the window)
PHASE_HISTOGRAMS = {
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "kv_transfer": "infra_agent:kv_transfer_time_seconds",
    "engine_ttft": "vllm:time_to_first_token_seconds",
}
# Requests the engine counts as finished (vLLM's and the built-in engine's name): a run's scrape
# waits until this has caught up with what the client saw finish (jobs.py)
FINISHED = "vllm:e2e_request_latency_seconds_count"
PREEMPTIONS = "vllm:num_preemptions"
PREFIX_QUERIES, PREFIX_HITS = "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"
PHASE_METRIC = {
    **PHASE_HISTOGRAMS,
    "preemptions": PREEMPTIONS,
    "prefix_cache_hit_rate": PREFIX_HITS,
}


def parse(text: str) -> dict[str, float]:
    """Prometheus text -> {sample name: value summed over label sets} (histograms as _sum/_count)."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            name = (
                sample.name
            )  # buckets keep their edge: NAME_bucket{le="0.01"} (engine_truth.py reads them)
            name += f'{{le="{sample.labels["le"]}"}}' if name.endswith("_bucket") else ""
            totals[name] = totals.get(name, 0.0) + float(sample.value)
    return totals


def window(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Phase means (ms per request) and counters over the window between two scrapes."""

    def delta(name: str) -> float | None:
        if name not in after:
            return None
        return after[name] - before.get(name, 0.0)

    phases: dict[str, float | None] = {}
    for phase, hist in PHASE_HISTOGRAMS.items():
        total, count = delta(hist + "_sum"), delta(hist + "_count")
        phases[f"{phase}_ms"] = 1e3 * total / count if total is not None and count else None
    phases["preemptions"] = delta(PREEMPTIONS + "_total")
    queries, hits = delta(PREFIX_QUERIES + "_total"), delta(PREFIX_HITS + "_total")
    phases["prefix_cache_hit_rate"] = hits / queries if queries and hits is not None else None
    return phases
