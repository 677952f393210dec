"""One ladder step from its serve_benchmark child: the SLO verdict, the numbers the answer uses,
the child's findings, and whether the step measured the engine at all.

A step is kept out of the SLO verdicts (highest load, front, best config) when its numbers measure
something else than a cold engine under load:
- cache_warm_step: the engine's own prefix-cache counter found the step's prompts cached (every
  step sends prompts of its own seed, so on a random or ShareGPT workload the hit rate is ~0; a
  warm step hides what prefill costs: a small token budget read 256 ms TTFT p99 warm, 964 cold);
- client_starved: the load generator waited for a CPU for much of a run (serve_benchmark's
  finding): the step is measured again with new prompts, and excluded if it is starved again;
- single_wave: a closed loop with num_requests <= concurrency sends everything at once, one wave
  with no steady state (or serve_benchmark's own single_wave finding).
"""

from __future__ import annotations

from ..serve_benchmark.engine_truth import CLIENT_STARVED
from .schema import Input, Step

WARM_HIT_RATE = 0.05  # a repeat finding more of its prompt tokens cached than this is warm
HOST_BOUND = (CLIENT_STARVED,)  # child finding codes whose step is measured again
COLD_DATASETS = ("random", "sharegpt")  # shared_prefix hits the cache within a run, by design


def code(finding: str) -> str:
    """A finding's code: the words before its first colon (serve_benchmark's 'code: words')."""
    return finding.split(":", 1)[0].strip()


def build(inp: Input, load: float, experiment_id: str, reused: bool, result: dict) -> Step:
    metrics, spread = result.get("metrics") or {}, result.get("spread") or {}
    broke, values = [], {}
    for key, limit in inp.slo.items():
        name = key[:-3]  # ttft_p99_ms -> ttft_p99
        value = metrics.get(name)
        interval = spread.get(name) or ([value, value] if value is not None else None)
        if interval is None:
            broke.append(f"{name} not measured (no request gave it)")
            continue
        values[key] = interval
        if interval[1] > limit:
            broke.append(f"{name} {interval[1]:.1f} ms (worst repeat) > {limit:g} ms")
    failed = metrics.get("failed")
    worst_failed = (spread.get("failed") or [failed or 0, failed or 0])[1]
    if worst_failed:
        broke.append(
            f"{worst_failed:g} requests failed in a repeat "
            f"({result.get('first_error') or 'see the step'})"
        )
    goodput = metrics.get("goodput")
    if goodput is None and not broke:  # no per-request SLO to count against: every request counts
        goodput = metrics.get("request_throughput")
    total = metrics.get("output_throughput")
    step = Step(
        load=load,
        experiment_id=experiment_id,
        reused=reused,
        slo_met=not broke,
        broke=broke,
        goodput=goodput,
        goodput_interval=spread.get("goodput") or spread.get("request_throughput"),
        request_throughput=metrics.get("request_throughput"),
        output_throughput=total,
        output_throughput_interval=spread.get("output_throughput"),
        output_throughput_per_user=_per_user(inp.ladder.kind, load, metrics),
        ttft_p50_ms=metrics.get("ttft_p50"),
        slo_values=values,
        failed=failed,
        device_fingerprint=result.get("device_fingerprint"),
        prefix_cache_hit_rates=list(result.get("prefix_cache_hit_rates") or []),
        findings=[str(f) for f in result.get("findings") or []],
        output_throughput_repeats=[
            r.get("output_throughput") for r in result.get("repeats") or [] if isinstance(r, dict)
        ],
    )
    step.excluded = excluded(inp, step)
    return step


def excluded(inp: Input, step: Step) -> str | None:
    """Why `step` measures something else than a cold engine under load, or None."""
    hits = [h for h in step.prefix_cache_hit_rates if h is not None]
    work = inp.workload
    if (
        work.dataset in COLD_DATASETS
        and not work.reuse_prompts
        and any(h > WARM_HIT_RATE for h in hits)
    ):
        rates = ", ".join(f"{h:.2f}" for h in hits)
        return (
            f"cache_warm_step: the engine found the step's prompts in its prefix cache (hit "
            f"rates {rates} by its own counter, over {WARM_HIT_RATE:g}): a warm measurement "
            "hides prefill; kept out of the SLO verdicts"
        )
    # the plan's one wave first: no measurement can make it a verdict, so a starved client in it
    # is carried (in the step's findings) but never measured again
    if inp.ladder.kind == "concurrency" and work.num_requests <= step.load:
        return (
            f"single_wave: num_requests {work.num_requests} <= concurrency {step.load:g}: every "
            "request is sent at once, one wave with no steady state; kept out of the SLO verdicts "
            "(raise workload.num_requests to several times the highest concurrency)"
        )
    codes = {code(f): f for f in step.findings}
    for host in HOST_BOUND:
        if host in codes:
            return f"{codes[host]} (measured again and still so: kept out of the SLO verdicts)"
    if "single_wave" in codes:
        return f"{codes['single_wave']} (kept out of the SLO verdicts)"
    return None


def measure_again(step: Step) -> bool:
    """A step whose numbers measured the host for a moment (client_starved) is measured again."""
    return step.excluded is not None and code(step.excluded) in HOST_BOUND


def _per_user(kind: str, load: float, metrics: dict) -> float | None:
    total = metrics.get("output_throughput")
    if total is None:
        return None
    if kind == "concurrency":
        return total / load
    in_flight = (metrics.get("request_throughput") or 0) * (metrics.get("e2el_mean") or 0) / 1e3
    return total / in_flight if in_flight > 0 else None
