"""Racing: which config is fastest on one shape, for as little timing as that takes.

Every config that passed the gates starts in the race. Each round, every challenger is timed
against the current leader by microbench, interleaved in one job (the paired ratio of medians and
its 95% bootstrap CI, as microbench answers any A/B), each pair with the round's budget:

- a challenger whose CI lies wholly above 1 is slower than the leader: it leaves the race;
- one whose CI lies wholly below 1 is faster: the fastest such becomes the leader, and the old
  leader stays in as a challenger;
- one whose CI lies wholly within tie_margin_pct of 1 is as fast as the leader (within the
  margin): it stops racing and is reported as tied (on a CPU, num_warps changes nothing, and
  such configs would otherwise race to the last round);
- the rest cannot be told from the leader yet: they stay, and the next round doubles the budget
  (a tighter CI), for at most MAX_ROUNDS rounds.

The race is decided when the leader is the only config left racing. Configs are dropped only when their
own CI excludes them being as fast, so a config the noise cannot separate is never dropped, only
reported as tied. This is racing in the sense of F-Race and Hyperband's successive halving: the
budget goes where the decision is still open. `strategy="grid"` times every config once against
the first at the last round's budget, for comparison (bench/sweep_racing.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..common.sweep import Budget, Trials
from ..microbench.schema import MAX_BUDGET_MS
from .schema import MAX_ROUNDS, Contender, Input
from .stages import Candidate, code_arguments, shape_key

NEEDS_BUDGET = re.compile(r"raise budget_ms to about (\d+)")


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


@dataclass
class Race:
    shape: dict
    leader: Candidate | None
    contenders: list[Candidate]  # still racing, leader first
    equivalent: list[Candidate] = field(
        default_factory=list
    )  # as fast as the leader, within the margin
    last: dict[int, Pair] = field(
        default_factory=dict
    )  # id(candidate) -> its latest pair vs leader
    rounds: int = 0
    timing_ms: float = 0.0
    failed: dict[int, str] = field(default_factory=dict)  # id(candidate) -> why its timing failed
    stopped: str | None = None  # the budget ended it

    @property
    def decided(self) -> bool:
        return self.leader is not None and len(self.contenders) == 1 and self.stopped is None

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


async def race(
    inp: Input, trials: Trials, field_: list[Candidate], shape: dict, dtype: str, budget: Budget
) -> Race:
    state = Race(shape, field_[0] if field_ else None, list(field_))
    if len(field_) == 1:  # nothing to race: its time alone, so the answer has its numbers
        median = await time_alone(inp, trials, field_[0], shape, dtype)
        state.timing_ms += inp.round_ms if median is not None else 0.0
        return state
    if not field_:
        return state
    round_ms = inp.round_ms
    if inp.strategy == "grid":
        await _grid(inp, trials, state, dtype, budget, round_ms * 2 ** (MAX_ROUNDS - 1))
        return state
    for _ in range(MAX_ROUNDS):
        if len(state.contenders) < 2:
            break
        state.rounds += 1
        leader = state.leader
        assert leader is not None
        compared_to: dict[int, Candidate] = {}
        for c in state.contenders[1:]:
            if (why := budget.spent()) is not None:
                state.stopped = why
                return state
            pair, round_ms = await _time_pair(inp, trials, c, leader, shape, dtype, round_ms, state)
            if pair is not None:
                state.last[id(c)] = pair
                compared_to[id(c)] = leader
        _judge_round(state, compared_to, inp.tie_margin_pct / 100)
        round_ms = min(round_ms * 2, MAX_BUDGET_MS)
    if len(state.contenders) > 1:  # the rounds ran out: the ties' CIs against the final leader
        await _compare_to_final_leader(inp, trials, state, dtype, budget, round_ms)
    return state


def _judge_round(state: Race, compared_to: dict[int, Candidate], margin: float) -> None:
    leader = state.leader
    assert leader is not None
    pairs = {id(c): state.last[id(c)] for c in state.contenders[1:] if id(c) in compared_to}
    slower = {k for k, p in pairs.items() if p.ci_low > 1.0}
    same = {k for k, p in pairs.items() if 1 - margin <= p.ci_low and p.ci_high <= 1 + margin}
    faster = [c for c in state.contenders[1:] if id(c) in pairs and pairs[id(c)].ci_high < 1.0]
    kept = [
        c
        for c in state.contenders[1:]
        if id(c) not in slower and id(c) not in state.failed  # failed timing: out, with why
    ]
    if faster:
        kept += state.equivalent  # as fast as the old leader: to be compared with the new one
        state.equivalent = []
        new = min(faster, key=lambda c: pairs[id(c)].ratio)
        state.leader = new
        state.contenders = [new, leader, *(c for c in kept if c is not new)]
        state.last.pop(id(new), None)  # its pair was against the old leader
        # The old leader's standing against the new one is the inverse of the pair just measured.
        p = pairs[id(new)]
        state.last[id(leader)] = Pair(
            1 / p.ratio,
            1 / p.ci_high,
            1 / p.ci_low,
            p.leader_ms,
            p.challenger_ms,
            p.budget_ms,
            p.experiment_id,
        )
        for c in kept:  # compared with the old leader: not yet with the new one
            if c is not new:
                state.last.pop(id(c), None)
    else:
        state.equivalent += [c for c in kept if id(c) in same]
        state.contenders = [leader, *(c for c in kept if id(c) not in same)]


async def _time_pair(
    inp: Input,
    trials: Trials,
    challenger: Candidate,
    leader: Candidate,
    shape: dict,
    dtype: str,
    round_ms: float,
    state: Race,
) -> tuple[Pair | None, float]:
    """Time `challenger` against `leader`; a budget too small for the shape's call time is raised to
    what microbench asks for once (and kept for the rest of the race)."""
    for _ in range(2):
        args = {
            **code_arguments(inp),
            **_baseline_arguments(inp),
            "launch_config": challenger.config,
            "baseline_launch_config": leader.config,
            "shapes": [shape],
            "dtype": dtype,
            "budget_ms": round_ms,
        }
        trial = await trials.call("microbench", args)
        challenger.trials.append(trial.outcome.experiment_id)
        if trial.outcome.ok:
            state.timing_ms += round_ms
            row = (trial.result.get("shapes") or [{}])[0]
            if row.get("ratio") is None or row.get("verdict") == "invalid":
                state.failed[id(challenger)] = f"timing invalid: {trial.result.get('summary', '')}"
                return None, round_ms
            pair = Pair(
                row["ratio"],
                row["ci_low"],
                row["ci_high"],
                row["candidate"]["median_ms"],
                row["baseline"]["median_ms"],
                round_ms,
                trial.outcome.experiment_id,
            )
            challenger.medians[shape_key(shape)] = pair.challenger_ms
            leader.medians[shape_key(shape)] = pair.leader_ms
            return pair, round_ms
        needed = NEEDS_BUDGET.search(trial.outcome.error or "")
        if needed is None or float(needed.group(1)) > MAX_BUDGET_MS:
            break
        round_ms = max(round_ms, float(needed.group(1)))
    state.failed[id(challenger)] = f"timing failed: {trial.outcome.error}"
    return None, round_ms


async def time_alone(
    inp: Input, trials: Trials, c: Candidate, shape: dict, dtype: str
) -> float | None:
    """One config timed alone (microbench, no baseline) at round_ms: its median, ms, or None (and
    the config dropped) when the timing failed."""
    args = {
        **code_arguments(inp),
        "launch_config": c.config,
        "shapes": [shape],
        "dtype": dtype,
        "budget_ms": inp.round_ms,
    }
    t = await trials.call("microbench", args)
    c.trials.append(t.outcome.experiment_id)
    row = (t.result.get("shapes") or [{}])[0] if t.outcome.ok else {}
    median = (row.get("candidate") or {}).get("median_ms")
    if not median or row.get("verdict") == "invalid":
        c.dropped = f"timing failed: {t.outcome.error or t.result.get('summary', '')}"
        return None
    c.medians[shape_key(shape)] = median
    return median


def _baseline_arguments(inp: Input) -> dict:
    """The same code as the baseline arm (only its launch_config differs)."""
    entry = {"baseline_entry": inp.entry} if inp.entry else {}
    if inp.source is not None:
        return {"baseline_source": inp.source, **entry}
    if inp.path is not None:
        return {"baseline_path": inp.path, **entry}
    return {"baseline": inp.impl}  # run() resolved the spec's default impl


async def _grid(
    inp: Input, trials: Trials, state: Race, dtype: str, budget: Budget, budget_ms: float
) -> None:
    """Every config once against the first, at the final round's budget: one round, judged as
    the race judges one."""
    first = state.contenders[0]
    state.rounds = 1
    compared_to: dict[int, Candidate] = {}
    for c in state.contenders[1:]:
        if (why := budget.spent()) is not None:
            state.stopped = why
            break
        pair, budget_ms = await _time_pair(
            inp, trials, c, first, state.shape, dtype, budget_ms, state
        )
        if pair is not None:
            state.last[id(c)] = pair
            compared_to[id(c)] = first
    _judge_round(state, compared_to, inp.tie_margin_pct / 100)


async def _compare_to_final_leader(
    inp: Input, trials: Trials, state: Race, dtype: str, budget: Budget, round_ms: float
) -> None:
    leader = state.leader
    assert leader is not None
    for c in state.contenders[1:]:
        if id(c) in state.last or budget.spent() is not None:
            continue
        pair, round_ms = await _time_pair(
            inp, trials, c, leader, state.shape, dtype, round_ms, state
        )
        if pair is not None:
            state.last[id(c)] = pair
