"""One config's climb: launch its engine (only when a step is not already measured), one
serve_benchmark per ladder step, stop early on an SLO break or over-saturation, stop the engine.

Over-saturation follows the idea of guidellm's over-saturation detector
(vllm-project/guidellm, src/guidellm/scheduler/constraints/over_saturation.py): inside one run it
fits slopes over time to the requests in flight and to TTFT, and calls the server over-saturated
when both rise with confidence (the response rate no longer keeps up with the request rate). Here
the points are ladder steps, not requests: a config is over-saturated when, over two successive
steps, the offered load rose, output throughput stayed flat (it grew by less than a fifth of the
load's relative growth, or by less than the steps' own spread over repeats), and TTFT p50 kept
rising (by more than 10%). Two transitions, not one, because guidellm too
will not trust a slope from fewer than a handful of points.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from ..common.sweep import Budget, Trials
from . import plan
from .schema import Input, Step

FLAT_SHARE = 0.2  # throughput gaining < this share of the load's relative gain counts as flat
TTFT_RISE = 0.1  # TTFT p50 must rise by more than this fraction (and past its spread)
SATURATED_TRANSITIONS = 2


@dataclass
class Climb:
    """What one config's ladder came to."""

    steps: list[Step] = field(default_factory=list)
    stopped: str = "complete: every step measured"
    complete: bool = True
    launch_id: str | None = None
    launch_error: str | None = None
    children: list[str] = field(default_factory=list)  # launch, benchmarks, stop: in order
    measured: int = 0
    reused: int = 0
    budget_cut: bool = False  # the wall budget ended the ladder before its end


async def climb(inp: Input, config: plan.Planned, trials: Trials, budget: Budget) -> Climb:
    out = Climb()
    kind, handle = inp.ladder.kind, None
    try:
        for load in inp.ladder.loads:
            if (why := budget.spent()) is not None:
                out.stopped = f"cut off before {_load(kind, load)}: {why}"
                out.complete, out.budget_cut = False, True
                break
            bench = plan.bench_arguments(inp, kind, load, "")
            key = plan.step_key(config.key, bench)
            if handle is None and not trials.has(key):
                launched = await trials.ctx.call("launch_serve", config.launch)
                out.children.append(launched.experiment_id)
                out.launch_id = launched.experiment_id
                if (
                    not launched.ok and out.steps
                ):  # resumed: the steps an earlier sweep measured stand
                    out.stopped = f"{_load(kind, load)}: launch_serve failed: {launched.error}"
                    out.complete = False
                    break
                if not launched.ok:
                    out.launch_error = launched.error
                    return out
                handle = (launched.result or {})["handle"]
            bench["handle"] = handle or "(reused)"
            trial = await trials.call("serve_benchmark", bench, key=key)
            out.children.append(trial.outcome.experiment_id)
            out.reused += trial.reused
            out.measured += not trial.reused
            if not trial.outcome.ok:
                out.stopped = f"{_load(kind, load)}: serve_benchmark failed: {trial.outcome.error}"
                out.complete = False
                break
            step = _step(inp, load, trial.outcome.experiment_id, trial.reused, trial.result)
            out.steps.append(step)
            if not step.slo_met:
                out.stopped = f"SLO broken at {_load(kind, load)}: {'; '.join(step.broke)}"
                break
            if (why := over_saturated(out.steps, kind)) is not None:
                out.stopped = why
                break
    finally:
        if handle is not None:
            with anyio.CancelScope(shield=True):  # also when the sweep is cancelled
                stopped = await trials.ctx.call("stop_serve", {"handle": handle})
                out.children.append(stopped.experiment_id)
    return out


def _step(inp: Input, load: float, experiment_id: str, reused: bool, result: dict) -> Step:
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
    return Step(
        load=load,
        experiment_id=experiment_id,
        reused=reused,
        slo_met=not broke,
        broke=broke,
        goodput=goodput,
        goodput_interval=spread.get("goodput") or spread.get("request_throughput"),
        output_throughput=total,
        output_throughput_interval=spread.get("output_throughput"),
        output_throughput_per_user=_per_user(inp.ladder.kind, load, metrics),
        ttft_p50_ms=metrics.get("ttft_p50"),
        slo_values=values,
        failed=failed,
        device_fingerprint=result.get("device_fingerprint"),
    )


def _per_user(kind: str, load: float, metrics: dict) -> float | None:
    total = metrics.get("output_throughput")
    if total is None:
        return None
    if kind == "concurrency":
        return total / load
    in_flight = (metrics.get("request_throughput") or 0) * (metrics.get("e2el_mean") or 0) / 1e3
    return total / in_flight if in_flight > 0 else None


def over_saturated(steps: list[Step], kind: str) -> str | None:
    """Why the last steps show an over-saturated engine, or None (see the module's docstring)."""
    if len(steps) < SATURATED_TRANSITIONS + 1:
        return None
    last = steps[-SATURATED_TRANSITIONS - 1 :]
    for a, b in zip(last, last[1:]):
        if not (_flat(a, b) and _rising_ttft(a, b)):
            return None
    thr = " -> ".join(f"{s.output_throughput:.0f}" for s in last if s.output_throughput)
    ttft = " -> ".join(f"{s.ttft_p50_ms:.0f}" for s in last if s.ttft_p50_ms)
    loads = " -> ".join(f"{s.load:g}" for s in last)
    return (
        f"over-saturated at {_load(kind, last[-1].load)}: as the load rose {loads}, output "
        f"throughput stayed flat ({thr} tokens/s) while TTFT p50 rose ({ttft} ms)"
    )


def _flat(a: Step, b: Step) -> bool:
    if not a.output_throughput or b.output_throughput is None:
        return False
    gain = b.output_throughput / a.output_throughput - 1
    noise = _rel_width(a.output_throughput_interval, a.output_throughput) + _rel_width(
        b.output_throughput_interval, b.output_throughput
    )
    return gain < max(FLAT_SHARE * (b.load / a.load - 1), noise)


def _rising_ttft(a: Step, b: Step) -> bool:
    if not a.ttft_p50_ms or b.ttft_p50_ms is None:
        return False
    return b.ttft_p50_ms > a.ttft_p50_ms * (1 + TTFT_RISE)


def _rel_width(interval: list[float] | None, value: float | None) -> float:
    if not interval or not value:
        return 0.0
    return (interval[1] - interval[0]) / value


def _load(kind: str, load: float) -> str:
    return f"concurrency {load:g}" if kind == "concurrency" else f"rate {load:g} req/s"
