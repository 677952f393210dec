"""One config's climb: launch its engine (only when a step is not already measured), one
serve_benchmark per ladder step, stop early on an SLO break or over-saturation, stop the engine.

Over-saturation follows the idea of guidellm's over-saturation detector
(vllm-project/guidellm, src/guidellm/scheduler/constraints/over_saturation.py): inside one run it
fits slopes over time to the requests in flight and to TTFT, and calls the server over-saturated
when both rise with confidence (the response rate no longer keeps up with the request rate). Here
the points are ladder steps, not requests: a config is over-saturated when, over two successive
steps, the offered load rose, output throughput stayed flat (it grew by less than a fifth of the
load's relative growth in at least one pair of repeats: repeat i of one step against repeat i
of the next), and TTFT p50 kept rising (by more than 10%). The step where it is
found is never the config's highest load. Two transitions, not one, because guidellm too
will not trust a slope from fewer than a handful of points.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from ..common.sweep import Budget, Trials
from . import plan, steps
from .schema import Input, Step

FLAT_SHARE = 0.2  # throughput gaining < this share of the load's relative gain counts as flat
TTFT_RISE = 0.1  # TTFT p50 must rise by more than this fraction (and past its spread)
SATURATED_TRANSITIONS = 2
MEASURES = 2  # a step measuring the host (client_starved) is measured once more


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
    running: str | None = None  # the child call in flight, in words, if any
    finished: bool = False  # climb() returned (False: the wall budget ended it mid-call)

    def cut_mid_call(self, why: str) -> None:
        """The wall budget ended this climb while a child ran (`running`): that call was ended
        (its ledger row an error), the steps measured before it stand."""
        self.stopped = f"cut during {self.running}: {why}" if self.running else f"cut: {why}"
        self.complete, self.budget_cut = False, True


Report = Callable[[float, str], Awaitable[None]]  # (share of this config done 0-1, message)


async def _quiet(done: float, message: str) -> None:
    return None


async def climb(
    inp: Input,
    config: plan.Planned,
    trials: Trials,
    budget: Budget,
    report: Report = _quiet,
    out: Climb | None = None,
) -> Climb:
    """`report`: a progress line per launch and per step, with the share of the ladder done;
    `out`: the Climb to fill as it goes (a climb the wall budget cancels keeps what it measured
    there)."""
    out = out if out is not None else Climb()
    await _climb(inp, config, trials, budget, report, out)
    out.finished = True
    return out


async def _climb(
    inp: Input, config: plan.Planned, trials: Trials, budget: Budget, report: Report, out: Climb
) -> Climb:
    loads = len(inp.ladder.loads)
    kind, handle = inp.ladder.kind, None
    try:
        for index, load in enumerate(inp.ladder.loads):
            set_aside: list[str] = []
            for attempt in range(MEASURES):
                if (why := budget.spent()) is not None:
                    out.stopped = f"cut off before {_load(kind, load)}: {why}"
                    out.complete, out.budget_cut = False, True
                    return out
                bench = plan.bench_arguments(inp, kind, load, "", plan.step_draw(index, attempt))
                key = plan.step_key(config.key, bench)
                if handle is None and not trials.has(key):
                    out.running = "the engine's launch"
                    launched = await trials.ctx.call(
                        "launch_serve",
                        config.launch,
                        trial_progress(report, index / loads, "launch"),
                    )
                    out.running = None
                    out.children.append(launched.experiment_id)
                    out.launch_id = launched.experiment_id
                    if not launched.ok and out.steps:  # resumed: earlier steps stand
                        out.stopped = f"{_load(kind, load)}: launch_serve failed: {launched.error}"
                        out.complete = False
                        return out
                    if not launched.ok:
                        out.launch_error = launched.error
                        return out
                    handle = (launched.result or {})["handle"]
                    await report(index / loads, f"engine up ({handle})")
                bench["handle"] = handle or "(reused)"
                out.running = f"the serve_benchmark at {_load(kind, load)}"
                trial = await trials.call(
                    "serve_benchmark",
                    bench,
                    key=key,
                    progress=trial_progress(report, index / loads, _load(kind, load)),
                )
                out.running = None
                out.children.append(trial.outcome.experiment_id)
                out.reused += trial.reused
                out.measured += not trial.reused
                if not trial.outcome.ok:
                    out.stopped = (
                        f"{_load(kind, load)}: serve_benchmark failed: {trial.outcome.error}"
                    )
                    out.complete = False
                    return out
                step = steps.build(
                    inp, load, trial.outcome.experiment_id, trial.reused, trial.result
                )
                await report((index + 1) / loads, f"{_load(kind, load)}: {_said(step)}")
                if not steps.measure_again(step) or attempt == MEASURES - 1:
                    break
                set_aside.append(step.experiment_id)  # starved: measured again, new prompts
            step.set_aside = set_aside
            out.steps.append(step)
            if not step.counts:  # its numbers measured the host or a warm cache: no verdict
                continue
            if not step.slo_met:
                out.stopped = f"SLO broken at {_load(kind, load)}: {'; '.join(step.broke)}"
                break
            if (why := over_saturated([s for s in out.steps if s.counts], kind)) is not None:
                step.over_saturated = True  # never the config's highest load
                out.stopped = why
                break
    finally:
        if handle is not None:
            with anyio.CancelScope(shield=True):  # also when the sweep is cancelled
                stopped = await trials.ctx.call("stop_serve", {"handle": handle})
                out.children.append(stopped.experiment_id)
    return out


def trial_progress(report: Report, share: float, what: str):
    """A trial's own progress (the engine starting, each request of a step) as the sweep's,
    at the share of the ladder done when it began."""

    async def forward(done: float, total: float | None, message: str) -> None:
        if message:
            await report(share, f"{what}: {message}")

    return forward


def _said(step: Step) -> str:
    verdict = "SLO met" if step.slo_met else "SLO broken"
    tokens = f"{step.output_throughput:.0f} tokens/s" if step.output_throughput else "no tokens"
    kept_out = f"; kept out of the verdicts: {steps.code(step.excluded)}" if step.excluded else ""
    return f"{verdict}, {tokens}{kept_out}"


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
    """Throughput grew by less than FLAT_SHARE of the load's relative growth in at least one
    pair of repeats (repeat i of one step against repeat i of the next, run minutes apart on the
    same drifting host): growth counts only when every pair shows it. The medians' gain without
    per-repeat numbers. The repeats' spreads are not added to the threshold: that read a +41%
    rise as flat."""
    if not a.output_throughput or b.output_throughput is None:
        return False
    pairs = [
        y / x - 1
        for x, y in zip(a.output_throughput_repeats, b.output_throughput_repeats)
        if x and y is not None
    ]
    gain = min(pairs) if pairs else b.output_throughput / a.output_throughput - 1
    return gain < FLAT_SHARE * (b.load / a.load - 1)


def _rising_ttft(a: Step, b: Step) -> bool:
    if not a.ttft_p50_ms or b.ttft_p50_ms is None:
        return False
    return b.ttft_p50_ms > a.ttft_p50_ms * (1 + TTFT_RISE)


def _load(kind: str, load: float) -> str:
    return f"concurrency {load:g}" if kind == "concurrency" else f"rate {load:g} req/s"
