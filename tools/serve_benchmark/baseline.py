"""What a serve_benchmark run is judged against, resolved once: an earlier experiment
(`baseline=`, its recorded numbers and requests) or a running engine measured alternately in
this call (`baseline_handle=`). Either way the rest of the tool reads one `Baseline`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ...serving.lifecycle import Engine
from ..base import AgentError, ToolContext
from ..common import provenance
from .engine_truth import CACHE_SPREAD
from .judge import aggregate
from .schema import Input, RepeatMetrics


@dataclass(frozen=True)
class Baseline:
    # the names of Output.metrics: latencies in ms, throughputs per s, counts, fractions
    metrics: dict[str, float | None]  # median over the baseline's repeats
    spread: dict[str, list[float]]  # [min, max] over its repeats, same units
    records: (
        list[dict] | None
    )  # its last repeat's requests (requests.jsonl rows, ms): the latency plot
    source: str  # "experiment <id>" (measured earlier) or "handle <h>, alternating" (in this call)
    device_fingerprint: str | None  # where its engine ran (engine_device); None: not known
    repeats: list[RepeatMetrics] = field(default_factory=list)  # measured in this call only


def recorded(inp: Input, ctx: ToolContext) -> Baseline | None:
    """The `baseline=` experiment's numbers, checked before anything runs; None without one."""
    if inp.baseline is not None and inp.baseline_handle is not None:
        raise AgentError(
            "give baseline= (an earlier experiment) or baseline_handle= (a running engine measured "
            "alternately in this call), not both"
        )
    if inp.baseline is None:
        return None
    row = ctx.experiment(inp.baseline)
    if (
        row is None
        or row.get("tool") != "serve_benchmark"
        or not (row.get("result") or {}).get("metrics")
    ):
        raise AgentError(
            f"baseline {inp.baseline!r} is not a successful serve_benchmark experiment; give the "
            "experiment_id an earlier serve_benchmark returned (list_experiments tool=serve_benchmark)"
        )
    result = row["result"]
    text = ctx.read_artifact(inp.baseline, "requests.jsonl")
    return Baseline(
        metrics=result["metrics"],
        spread=result.get("spread", {}),
        records=None if text is None else last_repeat(text),
        source=f"experiment {inp.baseline}",
        device_fingerprint=result.get("device_fingerprint") or _one_device(row),
    )


def _one_device(row: dict) -> str | None:
    """A recorded benchmark's device from where its work ran, when that is one device (a row
    from before serve_benchmark recorded device_fingerprint)."""
    devices = provenance.devices_ran_on(row)
    return devices[0] if len(devices) == 1 else None


def engine_device(engine: Engine) -> str:
    """The device fingerprint of the host an engine runs on: its cluster node's, or this one's."""
    if engine.placement is not None:
        return engine.placement.device_fingerprint
    return provenance.fingerprint(provenance.device_facts())


def other_device_finding(this: str | None, base: Baseline) -> list[str]:
    """other_device, when the two sides' engines ran on devices with different fingerprints: a
    difference between them is then the device's as well as the change's."""
    if this is None or base.device_fingerprint is None or this == base.device_fingerprint:
        return []
    return [
        f"other_device: this engine ran on device {this}, the baseline ({base.source}) on "
        f"{base.device_fingerprint} (device fingerprints: hardware and package versions; "
        "compare_experiments shows both): every difference between them includes the "
        "device's, not only the change's; to measure the change alone, run both on one kind "
        "of device (the same resources= with an accelerator type, or both on the server's host)"
    ]


def cache_warmth_finding(metrics: dict[str, float | None], base: Baseline) -> list[str]:
    """baseline_cache_warm, when the baseline's prefix-cache hit rate (median over its repeats,
    the engine's own counters) and this run's differ by more than CACHE_SPREAD: one side measured
    prompts its engine had already cached (a baseline that was a sweep step, or a rerun of the same
    seed on a live engine), so prefill, TTFT and throughput compare a warm cache with a cold one."""
    this, then = metrics.get("prefix_cache_hit_rate"), base.metrics.get("prefix_cache_hit_rate")
    if this is None or then is None or abs(this - then) <= CACHE_SPREAD:
        return []
    warm, cold = ("the baseline", "this run") if then > this else ("this run", "the baseline")
    if base.repeats:  # measured in this call: the same prompts went to both engines, alternating
        return [
            f"baseline_cache_warm: the baseline ({base.source}) found {100 * then:.0f}% of its "
            f"prompt tokens in the prefix cache and this engine {100 * this:.0f}% (each engine's "
            "own counters, median over repeats), though both were sent the same prompts in this "
            f"call: the engines cache differently, and {cold}'s TTFT, prefill and throughput pay "
            f"for it. {cold.capitalize()}'s engine may run with prefix caching off "
            f"(enable_prefix_caching) or a smaller KV cache, or {warm}'s had seen these prompts in "
            "an earlier call with this workload.seed. Next: compare the two engines' arguments "
            "(list_serves); rerun with a fresh workload.seed to rule out the earlier call"
        ]
    return [
        f"baseline_cache_warm: the baseline ({base.source}) found {100 * then:.0f}% of its prompt "
        f"tokens in the prefix cache and this run {100 * this:.0f}% (each engine's own counters, "
        f"median over repeats): {warm} measured a warm cache, {cold} a cold one, so TTFT, prefill "
        "and throughput differ by the cache as well as by the change. Next: measure both sides "
        "cold: a fresh workload.seed (or a restarted engine) for each, or baseline_handle= to "
        "measure both engines in one call with prompts of their own; or compare against a "
        "baseline whose hit rate matches this run's"
    ]


def measured(
    handle: str, device_fingerprint: str, repeats: list[RepeatMetrics], records_jsonl: str
) -> Baseline:
    """The baseline engine's repeats of this call (`baseline_handle=`), on its device."""
    metrics, spread = aggregate(repeats)
    return Baseline(
        metrics=metrics,
        spread=spread,
        records=last_repeat(records_jsonl),
        source=f"handle {handle}, alternating",
        device_fingerprint=device_fingerprint,
        repeats=repeats,
    )


def last_repeat(jsonl: str) -> list[dict]:
    """The rows of the last repeat in a requests.jsonl."""
    rows = [json.loads(line) for line in jsonl.splitlines() if line.strip()]
    last = max((r["repeat"] for r in rows), default=0)
    return [r for r in rows if r["repeat"] == last]
