"""Racing: which config is fastest on one shape, for as little timing as that takes.

Every config that passed the gates starts in the race; the first is the leader. Each round, every
challenger is timed against the current leader by microbench, interleaved in one job (the paired
ratio of medians and its 95% bootstrap CI, as microbench answers any A/B), and judged at once:

- its CI lies wholly above 1: slower than a leader, and leaders only get faster: it is out;
- wholly below 1: faster: it becomes the leader at once, and the rest of the round races
  against it. The old leader is out (slower than a leader), and so is every config whose pair
  against the old leader already shows it slower than the new one (its CI's low end over the new
  leader's CI high end against the old is above 1);
- wholly within tie_margin_pct of 1: as fast as the leader within the margin: it stops racing
  and is reported as tied (on a CPU, num_warps changes nothing: such configs would otherwise
  race to the last round);
- otherwise it cannot be told from the leader yet and stays for the next round, whose budget is
  twice this one's (a tighter CI), for at most MAX_ROUNDS rounds.

A pair whose calls are too slow for the round's budget is retried once, for that pair only,
with the budget microbench's refusal itself estimated (at most microbench's cap). A pair still
refused (the host got busier), or one whose calls are too slow for even the minimum of timed
calls within the cap, was never compared: the challenger leaves this shape's
race without being dropped, and the shape is undecided, with why. A winner is only ever a config
that was timed on the shape: a leader never timed (every pair against it refused) wins nothing.

The race is decided when the leader, timed, is the only config left racing and no pair was
refused. A config is dropped only
when its own CI excludes it being as fast, so one the noise cannot separate is never dropped,
only reported as tied. This is racing in the sense of F-Race and Hyperband's successive halving:
the budget goes where the decision is still open. `strategy="grid"` times every config once
against the first at the last round's budget, for comparison (bench/sweep_racing.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...sandbox.worker.shared import ratio_decision
from ..common.sweep import Budget, Trial, Trials, label
from ..microbench.schema import MAX_BUDGET_MS, MIN_TIMED_CALLS
from .schema import MAX_ROUNDS, Contender, Input
from .stages import Candidate, code_arguments, shape_key

# microbench's refusal when the budget fits too few timed calls, and the call time it measured
TOO_FEW = re.compile(r"\(about (\d+) ms per call\); raise budget_ms to about (\d+)")


def is_refusal(row: dict) -> bool:
    """A ledger row of microbench refusing a budget too small for its timed calls (its words give
    the estimate the retry uses: a resumed sweep replays it, so the retry's arguments match)."""
    return row.get("tool") == "microbench" and TOO_FEW.search(row.get("error") or "") is not None


WARMUP_CALLS = 6  # room for microbench's warm-up before its timed calls, per arm


@dataclass(frozen=True)
class Pair:
    """One microbench A/B: challenger against leader on one shape."""

    ratio: float
    ci_low: float
    ci_high: float
    challenger_ms: float
    leader_ms: float
    budget_ms: float
    experiment_id: str

    def inverse(self) -> Pair:
        """The same measurement read the other way round (the leader against the challenger)."""
        return Pair(
            1 / self.ratio,
            1 / self.ci_high,
            1 / self.ci_low,
            self.leader_ms,
            self.challenger_ms,
            self.budget_ms,
            self.experiment_id,
        )


@dataclass
class Race:
    shape: dict
    leader: Candidate | None
    contenders: list[Candidate]  # still racing, leader first
    equivalent: list[Candidate] = field(default_factory=list)  # tied with the leader, in margin
    last: dict[int, Pair] = field(default_factory=dict)  # id(candidate) -> its pair vs the leader
    rounds: int = 0
    timing_ms: float = 0.0
    failed: dict[int, str] = field(default_factory=dict)  # id(candidate) -> why its timing failed
    untimed: list[Candidate] = field(default_factory=list)  # left with no pair: never compared
    stopped: str | None = None  # the budget ended it
    finished: bool = False  # ran to its end (not cut by the wall budget mid-call)

    @property
    def winner(self) -> Candidate | None:
        """The leader when it was timed on this shape: a config never timed never wins."""
        if self.leader is None or shape_key(self.shape) not in self.leader.medians:
            return None
        return self.leader

    @property
    def decided(self) -> bool:
        return (
            self.winner is not None
            and len(self.contenders) == 1
            and not self.untimed
            and self.stopped is None
        )

    def undecided_because(self) -> str | None:
        """Why the race has no decided winner (None when decided, or when no config survived)."""
        if self.decided or (self.leader is None and not self.untimed):
            return None
        why = [self.stopped] if self.stopped else []
        lead = label(self.leader.config) if self.leader else "the leader"
        why += [
            f"{label(c.config)} was never compared with {lead}: {self.failed.get(id(c), '')}"
            for c in self.untimed
        ]
        if self.stopped is None and len(self.contenders) > 1:
            why.append(
                f"{len(self.contenders) - 1} config(s) could not be told from {lead} in "
                f"{self.rounds} round(s)"
            )
        if self.winner is None and self.leader is not None:
            alone = self.failed.get(id(self.leader))
            why.append(
                f"{lead} was never timed on this shape, so it wins nothing"
                + (f": {alone}" if alone else "")
            )
        return "; ".join(why)

    def ties(self) -> list[Contender]:
        out = []
        for c in [*self.contenders[1:], *self.equivalent]:
            pair = self.last.get(id(c))
            out.append(
                Contender(
                    config=c.config,
                    ratio=pair.ratio if pair else None,
                    ci_low=pair.ci_low if pair else None,
                    ci_high=pair.ci_high if pair else None,
                )
            )
        return out

    def crown(self, challenger: Candidate, pair: Pair) -> None:
        """`challenger` beat the leader (its CI wholly below 1): it leads. The old leader is out
        (slower than a leader), and so is any config whose pair against the old leader already
        shows it slower than the new one: x / new >= (x / old, low end) / (new / old, high end)."""
        self.leader = challenger
        self.contenders.remove(challenger)
        self.contenders.pop(0)  # the old leader
        beaten = pair.ci_high
        keep = []
        for x in [*self.contenders, *self.equivalent]:
            against_old = self.last.get(id(x))
            if against_old is None or against_old.ci_low / beaten <= 1.0:
                keep.append(x)
        self.contenders = [challenger, *keep]
        self.equivalent = []
        self.last = {}  # every pair so far was against the old leader

    def judge(self, c: Candidate, pair: Pair, margin: float) -> None:
        self.last[id(c)] = pair
        decision = ratio_decision(pair.ci_low, pair.ci_high, margin)
        if decision == "slower":  # slower than a leader, and leaders only get faster
            self.contenders.remove(c)
        elif decision == "faster":
            self.crown(c, pair)
        elif decision == "tie":
            self.contenders.remove(c)
            self.equivalent.append(c)


def new_race(shape: dict, finalists: list[Candidate]) -> Race:
    """A race on `shape` among the finalists not dropped on a shape before; the first leads."""
    field_ = [c for c in finalists if c.dropped is None]
    return Race(shape, field_[0] if field_ else None, list(field_))


async def race(inp: Input, trials: Trials, state: Race, dtype: str, budget: Budget) -> None:
    """Run `state`'s race to its end (or the budget's), in place."""
    await _race(inp, trials, state, dtype, budget)
    state.finished = True  # not reached when the wall budget cancels it mid-call


async def _race(inp: Input, trials: Trials, state: Race, dtype: str, budget: Budget) -> Race:
    shape, field_ = state.shape, list(state.contenders)
    if len(field_) == 1:  # nothing to race: its time alone, so the answer has its numbers
        median, why = await time_alone(inp, trials, field_[0], shape, dtype)
        if median is not None:
            state.timing_ms += inp.round_ms
        elif field_[0].dropped:  # its own timing failed: dropped, with why
            state.leader, state.contenders = None, []
        else:  # refused: never timed, so it wins nothing (undecided, with why)
            state.failed[id(field_[0])] = why or ""
        return state
    if not field_:
        return state
    margin = inp.tie_margin_pct / 100
    if inp.strategy == "grid":
        await _grid(inp, trials, state, dtype, budget, margin)
        return state
    for r in range(MAX_ROUNDS):
        if len(state.contenders) < 2:
            break
        state.rounds += 1
        round_ms = min(inp.round_ms * 2**r, MAX_BUDGET_MS)
        for c in list(state.contenders[1:]):
            if c not in state.contenders[1:]:  # out, or crowned, earlier in this round
                continue
            if (why := budget.wall_spent()) is not None:
                state.stopped = why
                return state
            leader = state.leader
            assert leader is not None
            pair = await _time_pair(inp, trials, c, leader, shape, dtype, round_ms, state)
            if pair is None:  # never compared: out of this shape's race, which is undecided
                state.contenders.remove(c)
                state.untimed.append(c)
            else:
                state.judge(c, pair, margin)
    return state


async def _time_pair(
    inp: Input,
    trials: Trials,
    challenger: Candidate,
    leader: Candidate,
    shape: dict,
    dtype: str,
    budget_ms: float,
    state: Race,
) -> Pair | None:
    """Time `challenger` against `leader` (refused, retried once at the refusal's estimate).
    None when the pair was never timed: `state.failed` says why, and a config whose own timing
    failed (not a refusal of the budget) is dropped."""
    args = {
        **code_arguments(inp),
        **_baseline_arguments(inp),
        "launch_config": challenger.config,
        "baseline_launch_config": leader.config,
        "shapes": [shape],
        "dtype": dtype,
        # a race stops a pair once it is decided; the grid times every pair to the budget
        **({"decide_margin_pct": inp.tie_margin_pct} if inp.strategy == "race" else {}),
    }
    timed = await _timing(trials, args, budget_ms, challenger.trials, "pair", arms=2)
    if timed.why is not None:
        state.failed[id(challenger)] = timed.why
        if not timed.refused:
            challenger.dropped = challenger.dropped or timed.why
        return None
    trial = timed.trial
    assert trial is not None
    state.timing_ms += timed.budget_ms
    row = (trial.result.get("shapes") or [{}])[0]
    if row.get("ratio") is None or row.get("verdict") == "invalid":
        state.failed[id(challenger)] = f"timing invalid: {trial.result.get('summary', '')}"
        return None
    pair = Pair(
        row["ratio"],
        row["ci_low"],
        row["ci_high"],
        row["candidate"]["median_ms"],
        row["baseline"]["median_ms"],
        timed.budget_ms,
        trial.outcome.experiment_id,
    )
    challenger.timed(shape, pair.challenger_ms)
    leader.timed(shape, pair.leader_ms)
    ran_on = trials.devices(trial)  # one job: both arms on one device
    challenger.devices.update(ran_on)
    leader.devices.update(ran_on)
    return pair


async def time_alone(
    inp: Input, trials: Trials, c: Candidate, shape: dict, dtype: str
) -> tuple[float | None, str | None]:
    """One config timed alone (microbench, no baseline) at round_ms, or at the estimate of
    microbench's refusal: (its median in ms, None), or (None, why it was not timed). A failure of
    its own code drops the config; a budget refusal does not."""
    args = {**code_arguments(inp), "launch_config": c.config, "shapes": [shape], "dtype": dtype}
    timed = await _timing(trials, args, inp.round_ms, c.trials, "call", arms=1)
    if timed.why is not None:
        if not timed.refused:
            c.dropped = timed.why
        return None, timed.why
    assert timed.trial is not None
    row = (timed.trial.result.get("shapes") or [{}])[0]
    median = (row.get("candidate") or {}).get("median_ms")
    if not median or row.get("verdict") == "invalid":
        c.dropped = f"timing failed: {timed.trial.result.get('summary', '')}"
        return None, c.dropped
    c.timed(shape, median)
    c.devices.update(trials.devices(timed.trial))
    return median, None


@dataclass(frozen=True)
class Timed:
    """A microbench call that ended well (`trial`, at `budget_ms`), or why none did."""

    trial: Trial | None
    budget_ms: float
    why: str | None = None
    refused: bool = False  # microbench refused the budget: no fault of the code's


async def _timing(
    trials: Trials, args: dict, budget_ms: float, ids: list[str], what: str, arms: int
) -> Timed:
    """microbench at `budget_ms`; refused as too short, once more at the refusal's own estimate
    (a resumed sweep replays the refusal, so the retry's budget is the one recorded)."""
    for attempt in range(2):
        trial = await trials.call("microbench", {**args, "budget_ms": budget_ms})
        ids.append(trial.outcome.experiment_id)
        error = trial.outcome.error
        if error is None:
            return Timed(trial, budget_ms)
        too_few = TOO_FEW.search(error)
        if too_few is None:
            return Timed(None, budget_ms, f"timing failed: {error}")
        if attempt:
            why = (
                f"refused again at the budget the first refusal estimated ({budget_ms:g} ms; "
                "the host may have got busier)"
            )
            return Timed(None, budget_ms, f"{why} (microbench: {error})", refused=True)
        # the least that could fit microbench's minimum of timed calls, at the call time it saw
        least_ms = arms * float(too_few.group(1)) * (MIN_TIMED_CALLS + WARMUP_CALLS)
        if least_ms > MAX_BUDGET_MS:
            why = (
                f"the {what} needs at least {least_ms:g} ms of timing, over microbench's cap of "
                f"{MAX_BUDGET_MS:g} ms"
            )
            return Timed(None, budget_ms, f"{why} (microbench: {error})", refused=True)
        estimate_ms = float(too_few.group(2))
        budget_ms = min(max(estimate_ms, budget_ms * 2), MAX_BUDGET_MS)
    raise AssertionError("not reached: the second attempt returns")


def _baseline_arguments(inp: Input) -> dict:
    """The same code as the baseline arm (only its launch_config differs)."""
    entry = {"baseline_entry": inp.entry} if inp.entry else {}
    if inp.source is not None:
        return {"baseline_source": inp.source, **entry}
    if inp.path is not None:
        return {"baseline_path": inp.path, **entry}
    return {"baseline": inp.impl}  # run() resolved the spec's default impl


async def _grid(
    inp: Input, trials: Trials, state: Race, dtype: str, budget: Budget, margin: float
) -> None:
    """Every config once against the first, at the last round's budget; then the fastest of
    those that beat it (by CI) leads, and the rest are judged against the first as measured."""
    first = state.contenders[0]
    state.rounds = 1
    budget_ms = min(inp.round_ms * 2 ** (MAX_ROUNDS - 1), MAX_BUDGET_MS)
    pairs: dict[int, Pair] = {}
    for c in state.contenders[1:]:
        if (why := budget.wall_spent()) is not None:
            state.stopped = why
            break
        pair = await _time_pair(inp, trials, c, first, state.shape, dtype, budget_ms, state)
        if pair is not None:
            pairs[id(c)] = pair
    timed = [c for c in state.contenders[1:] if id(c) in pairs]
    state.untimed = [
        c for c in state.contenders[1:] if id(c) not in pairs and id(c) in state.failed
    ]
    state.contenders = [first, *timed]
    faster = [c for c in timed if pairs[id(c)].ci_high < 1.0]
    best = min(faster, key=lambda c: pairs[id(c)].ratio, default=None)
    state.last = dict(pairs)
    if best is not None:
        state.crown(best, pairs[id(best)])
    else:
        for c in timed:
            state.judge(c, pairs[id(c)], margin)
