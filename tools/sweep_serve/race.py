"""The race: which of the two leading configs is better, from paired measurements.

The ladders measure configs minutes apart on a host that drifts, so their leader can be noise:
two identical sweeps crowned different winners. As sweep_kernel's race does for kernels, the
two configs the ladders rank first (by the objective at each one's highest load meeting the
SLO) are then measured side by side: both engines up, one serve_benchmark per round with
`baseline_handle` (its repeats alternate A B B A, so a drifting host moves both alike), at the
deciding load (the higher of the two highest loads), with prompts no earlier measurement sent.
Repeat i of A and repeat i of B make a pair; the ratio A/B of the metric (goodput, or output
tokens/s with that objective) is the geometric mean over pairs, with a Student-t interval over
the log ratios. From the second round on, after each round:

- the interval excludes 1: decided, the better config is the best;
- it lies wholly within tie_margin_pct of 1: a tie, named (the two are as good as each other);
- else another round, up to race_rounds; then (or when the wall budget is spent: it ends the
  launch or round in flight, whose pairs do not count) undecided, and the best config is the
  ladders' pick, said to be undecided.

A round whose serve_benchmark says it measured the host (client_starved: the load generator
waited for a CPU for much of its runs, as a ladder step that does is kept out of the SLO verdicts)
is run but kept out of the ratio, and named in `kept_out`: beside two CPU hogs the pairs of one
round share the host's state (which engine the scheduler favours for those seconds), two
identical engines read 8-20% apart call by call, and with those rounds counted the race decided
an A/A twice in a row (1.197 [1.048, 1.367] after 2 rounds). A race whose every round measured
the host ends undecided and says so.

Each look holds its interval at 1 - 0.05 / looks (Bonferroni over the rounds that may decide),
so that an A/A (two identical configs) is decided in at most 5% of sweeps.

Each repeat lasts about race_repeat_s (1 s by default): the race sends max(num_requests,
race_repeat_s x the request throughput the ladders measured at the deciding load) requests a
repeat, because short repeats measure the host's scheduling more than the engines. Measured
(bench/sweep_serve_aa.py, docs/measured.md), two identical built-in engines alternating on a
quiet 2-core host: the per-pair log ratio of request throughput spreads with sigma 0.13 at 12
requests a repeat (~0.03 s), 0.08 at 48 (0.1 s), 0.05 at 192 (0.5 s), 0.04 at 384 and 768 (1
and 2 s: the host's floor). With 1 s repeats, the race's rule over 1000 simulated A/A races
ties 45% within 4 rounds and 95-97% within 10, and decides a planted 1.3x in every race with
the slower config never crowned. Real A/A sweeps spread wider (~7% at one sigma): with 10 rounds
3 of 6 tied, with 20 rounds 10 of 10 (after 6-13 rounds, 48-96 s a sweep). So 20 is the
default: a clear difference settles at the first look, only near-equal configs run long.

Under other work the host's contention dominates whatever the length: two engines' pairs spread
with sigma 0.22-0.30 at load 3-15, 4x longer repeats no steadier, and neither were the engine's
own per-request time and inter-token gap from /metrics (contention slows the engine itself). A
tie in 9 of 10 A/As there would take ~500 pairs at +-5%; such a race ends undecided and says the
margin its interval would have needed for a tie (`why`): the honest answer for the host, and
what to raise (tie_margin_pct, race_rounds, race_repeat_s) to get one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from ...sandbox.worker.shared import ratio_decision
from ..common.sweep import Budget, Trials
from . import plan
from .ladder import trial_progress
from .plan import Planned
from .schema import MAX_REPEAT_REQUESTS, ConfigAnswer, Input, Race
from .steps import HOST_BOUND, code

PAIRS_PER_ROUND = 2  # serve_benchmark repeats per round: A B B A
MIN_ROUNDS = 2  # the first look: two rounds, four pairs
FAMILY_ALPHA = 0.05


@dataclass
class Contest:
    """The race as it runs: its children and the pairs measured."""

    leader: Planned
    challenger: Planned
    load: float
    metric: str
    repeat_requests: int  # requests per repeat, sized to last race_repeat_s at the deciding load
    ratios: list[float] = field(default_factory=list)  # leader / challenger per pair
    children: list[str] = field(default_factory=list)
    rounds: int = 0  # rounds run, kept out ones included
    kept_out: list[str] = field(default_factory=list)  # rounds that measured the host, why
    budget_cut: bool = False  # the wall budget ended it before it settled or ran every round
    decision: str | None = None  # ratio_decision's verdict at the last look, if any
    interval: tuple[float, float] | None = None  # the ratio's interval at the last look
    stopped: str = "not started"  # why the rounds ended, in words
    running: str | None = None  # the child call in flight, in words, if any

    def cut_mid_call(self, rounds: int, why: str) -> None:
        """The wall budget ended the race while a child ran: that call was ended (its ledger row
        an error), the rounds measured before it stand."""
        during = f" during {self.running}" if self.running else ""
        self.stopped = f"cut after {self.rounds} of {rounds} rounds{during}: {why}"
        self.budget_cut = True


def metric_of(inp: Input) -> str:
    return "output_throughput" if inp.objective == "output_throughput" else "goodput"


def contest(
    inp: Input, leader: tuple[Planned, ConfigAnswer], challenger: tuple[Planned, ConfigAnswer]
) -> Contest:
    """The race of the two leading configs, before it runs: at the deciding load (the higher of
    their highest loads meeting the SLO)."""
    load = max(leader[1].highest_load or 0.0, challenger[1].highest_load or 0.0)
    rates = [
        s.request_throughput
        for _, answered in (leader, challenger)
        for s in answered.steps
        if s.load == load and s.request_throughput
    ]
    return Contest(leader[0], challenger[0], load, metric_of(inp), repeat_requests(inp, rates))


def repeat_requests(inp: Input, rates: list[float]) -> int:
    """Requests per race repeat: enough for race_repeat_s at the slower of `rates` (requests/s
    measured at the deciding load), never fewer than the workload's own num_requests."""
    wanted = math.ceil(inp.race_repeat_s * min(rates)) if rates else 0
    return max(inp.workload.num_requests, min(wanted, MAX_REPEAT_REQUESTS))


async def race(
    inp: Input,
    contest: Contest,
    trials: Trials,
    budget: Budget,
    report: Callable[[float, str], Awaitable[None]],
) -> Race:
    """Run `contest`, filling it as it goes (a race the wall budget cancels mid-call keeps its
    rounds: answer() then says so); `report`: a progress line per launch and round, with the
    share of the rounds done."""
    handles: dict[str, str] = {}
    contest.stopped = f"all {inp.race_rounds} rounds ran"
    try:
        for round_ in range(inp.race_rounds):
            if (why := budget.wall_spent()) is not None:
                contest.stopped = f"cut after {contest.rounds} of {inp.race_rounds} rounds: {why}"
                contest.budget_cut = True
                break
            bench = plan.bench_arguments(
                inp, inp.ladder.kind, contest.load, "", plan.RACE_DRAW + round_
            )
            bench["repeats"] = PAIRS_PER_ROUND
            bench["workload"]["num_requests"] = contest.repeat_requests
            key = plan.race_key(contest.leader.key, contest.challenger.key, bench)
            if not handles and not trials.has(key):
                why = await _launch(contest, trials, handles, report, round_ / inp.race_rounds)
                if why is not None:
                    contest.stopped = why
                    break
            bench["handle"] = handles.get("leader", "(reused)")
            bench["baseline_handle"] = handles.get("challenger", "(reused)")
            contest.running = f"round {round_ + 1}'s serve_benchmark"
            trial = await trials.call(
                "serve_benchmark",
                bench,
                key=key,
                progress=trial_progress(
                    report, contest.rounds / inp.race_rounds, f"race round {round_ + 1}"
                ),
            )
            contest.running = None
            contest.children.append(trial.outcome.experiment_id)
            if not trial.outcome.ok:
                contest.stopped = (
                    f"round {round_ + 1}'s serve_benchmark failed: {trial.outcome.error}"
                )
                break
            contest.rounds += 1
            host = [f for f in trial.result.get("findings") or [] if code(f) in HOST_BOUND]
            if host:  # its pairs measured the host, not the configs: no verdict rests on them
                contest.kept_out.append(f"round {round_ + 1}: {host[0][:200]}")
                await report(
                    contest.rounds / inp.race_rounds,
                    f"race round {contest.rounds}: kept out, it measured the host ({code(host[0])})",
                )
                continue
            contest.ratios += paired_ratios(trial.result, contest.metric)
            counted = contest.rounds - len(contest.kept_out)
            if counted >= MIN_ROUNDS and len(contest.ratios) >= 2:
                contest.interval = ratio_interval(contest.ratios, looks(inp.race_rounds))
                contest.decision = ratio_decision(*contest.interval, inp.tie_margin_pct / 100)
                await report(
                    contest.rounds / inp.race_rounds,
                    f"race round {contest.rounds}: {contest.leader.label} / "
                    f"{contest.challenger.label} = {geomean(contest.ratios):.3f} "
                    f"[{contest.interval[0]:.3f}, {contest.interval[1]:.3f}]",
                )
                if contest.decision is not None:
                    contest.stopped = f"settled after {contest.rounds} rounds"
                    break
    finally:
        with anyio.CancelScope(shield=True):  # also when the sweep is cancelled
            for handle in handles.values():
                stop = await trials.ctx.call("stop_serve", {"handle": handle})
                contest.children.append(stop.experiment_id)
    return answer(inp, contest)


async def _launch(
    contest: Contest, trials: Trials, handles: dict[str, str], report, share: float
) -> str | None:
    """Both engines up, or why not; each launch's own progress (a vLLM start takes minutes) is
    forwarded as the race's, at `share` of the rounds done."""
    for side, planned in (("leader", contest.leader), ("challenger", contest.challenger)):
        what = f"race: starting {planned.label}"
        await report(share, what)
        contest.running = f"{planned.label}'s launch"
        launched = await trials.ctx.call(
            "launch_serve", planned.launch, trial_progress(report, share, what)
        )
        contest.running = None
        contest.children.append(launched.experiment_id)
        if not launched.ok:
            return f"{planned.label}'s engine did not start again: {launched.error}"
        handles[side] = (launched.result or {})["handle"]
    return None


def paired_ratios(result: dict, metric: str) -> list[float]:
    """leader / challenger of `metric` per pair of repeats (repeat i of each, back to back)."""
    out = []
    for a, b in zip(result.get("repeats") or [], result.get("baseline_repeats") or []):
        x, y = _value(a, metric), _value(b, metric)
        if x is not None and y is not None and x > 0 and y > 0:
            out.append(x / y)
        elif x is not None and y is not None and (x > 0) != (y > 0):
            out.append(1e3 if x > 0 else 1e-3)  # one side served nothing within the SLO
    return out


def _value(repeat: dict, metric: str) -> float | None:
    if metric == "goodput" and repeat.get("goodput") is None:
        return repeat.get("request_throughput")  # no per-request SLO: every request counts
    return repeat.get(metric)


def looks(rounds: int) -> int:
    return max(1, rounds - MIN_ROUNDS + 1)


def geomean(ratios: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(r) for r in ratios))


def ratio_interval(ratios: list[float], num_looks: int) -> tuple[float, float]:
    """The geometric mean ratio's interval at 1 - FAMILY_ALPHA / num_looks (Student t)."""
    from scipy import stats

    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = stats.t.ppf(1 - FAMILY_ALPHA / num_looks / 2, n - 1) * sd / math.sqrt(n)
    return math.exp(mean - half), math.exp(mean + half)


def answer(inp: Input, contest: Contest) -> Race:
    """The race's verdict from what `contest` measured (and why its rounds ended)."""
    decision, interval, stopped = contest.decision, contest.interval, contest.stopped
    ratio = geomean(contest.ratios) if contest.ratios else None
    if interval is None and len(contest.ratios) >= 2:  # cut short: the interval so far, said
        interval = ratio_interval(contest.ratios, looks(inp.race_rounds))
    leader, challenger = contest.leader.label, contest.challenger.label
    flip = decision == "faster"  # ratio_decision reads a time ratio: "faster" = leader below 1
    winner, runner_up = (challenger, leader) if flip else (leader, challenger)
    if flip and ratio is not None and interval is not None:
        ratio, interval = 1 / ratio, (1 / interval[1], 1 / interval[0])
    outcome = {"slower": "decided", "faster": "decided", "tie": "tie"}.get(decision or "")
    shown = (
        f"{ratio:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"
        if ratio is not None and interval is not None
        else "not measured"
    )
    if outcome == "decided":
        why = f"{winner} beats {runner_up}: {contest.metric} ratio {shown}, {stopped}"
    elif outcome == "tie":
        why = (
            f"a tie: {winner} / {runner_up} = {shown}, within {inp.tie_margin_pct:g}% of 1; "
            f"{stopped}"
        )
    elif not contest.ratios and contest.kept_out:
        why = (
            f"undecided: every round that ran measured the host ({len(contest.kept_out)} kept "
            f"out, first {contest.kept_out[0]}); {stopped}; {winner} stays the ladders' pick. "
            "Run the sweep again on a quieter host"
        )
    else:
        needed = (
            f" (a tie needs tie_margin_pct >= {math.ceil(100 * (max(interval[1], 1 / interval[0]) - 1))}"
            " for this interval; more and longer pairs narrow it: race_rounds, race_repeat_s)"
            if interval is not None
            else ""
        )
        why = (
            f"undecided: {winner} / {runner_up} = {shown} neither excludes 1 nor lies within "
            f"{inp.tie_margin_pct:g}% of it{needed}; {stopped}; {winner} stays the ladders' pick"
        )
    if contest.kept_out and contest.ratios:
        why += (
            f"; {len(contest.kept_out)} of {contest.rounds} rounds kept out: they measured the "
            f"host (first {contest.kept_out[0]})"
        )
    return Race(
        outcome=outcome or "undecided",
        winner=winner,
        runner_up=runner_up,
        metric=contest.metric,
        load=contest.load,
        ratio=ratio,
        interval=list(interval) if interval is not None else None,
        pairs=len(contest.ratios),
        repeat_requests=contest.repeat_requests,
        rounds=contest.rounds,
        kept_out=contest.kept_out,
        tie_margin_pct=inp.tie_margin_pct,
        budget_cut=contest.budget_cut,
        why=why,
        experiment_ids=contest.children,
    )
