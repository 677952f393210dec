"""Spaces too large to enumerate: Optuna proposes the configs, and prunes the poor ones early.

Over MAX_GRID_POINTS configs the sweep does not try them all. Optuna's TPE sampler proposes one
config at a time from what it has seen (a model of good and bad regions); each proposal goes
through the same gates as a grid config (compile within the constraints, then numerics), and one
that passes is timed alone on each shape in turn (microbench, no baseline). Its median after each
shape is reported to Optuna as an intermediate value, and the successive-halving pruner stops a
config whose first shapes already rank it in the worse part of those seen: its remaining shapes
are never timed. A config's objective is the geometric mean of its medians over every shape.

The sampler's timings are single-arm medians from separate jobs, so they rank but do not decide:
the best FINALISTS configs then race per shape (race.py), interleaved, with CIs, as a grid's do.
"""

from __future__ import annotations

import math

from ..common.sweep import Budget, Config, Scalar, Space, Trials, label
from .race import time_alone
from .schema import Input
from .stages import Candidate, compile_all, numerics_gate

DEFAULT_SAMPLED_TRIALS = 32
FINALISTS = 4


async def sample(
    inp: Input,
    trials: Trials,
    space: Space,
    shapes: list[dict],
    dtype: str,
    budget: Budget,
    progress,
    tried_out: list[Candidate],
) -> tuple[list[Candidate], str | None]:
    """(the finalists to race, why sampling stopped early or None); every config tried is
    appended to `tried_out` as it is proposed (a sweep the wall budget cuts answers with them)."""
    import optuna  # imported on use: only sampled sweeps need it

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # its log goes to stderr, never stdout
    study = optuna.create_study(
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=inp.seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(),
    )
    wanted = budget.trials or DEFAULT_SAMPLED_TRIALS
    tried: dict[str, Candidate] = {}
    scores: dict[str, float] = {}
    stopped = None
    repeats = 0
    while len(tried) < wanted:
        if (why := budget.spent()) is not None:
            stopped = why
            break
        trial = study.ask()
        config: Config = {n: _suggest(trial, n, v) for n, v in space.dimensions.items()}
        key = label(config)
        if key in tried:  # TPE proposed a config it already has: answer from what we know
            repeats += 1
            if key in scores:
                study.tell(trial, scores[key])
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            if repeats > 4 * wanted:  # the sampler keeps returning to what it has seen
                stopped = "the sampler kept proposing configs it had tried"
                break
            continue
        c = tried[key] = Candidate(config)
        tried_out.append(c)
        budget.done += 1
        await compile_all(inp, trials, [c], shapes[0], dtype, budget)
        await numerics_gate(inp, trials, [c], shapes, dtype, budget)
        if not c.alive:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            score = await _timed_alone(inp, trials, c, shapes, dtype, trial)
            if score is None:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                scores[key] = score
                study.tell(trial, score)
        await progress(
            len(tried), wanted, f"sampled {len(tried)}/{wanted}: {key}: {_state(c, scores, key)}"
        )
    ranked = sorted((k for k in scores), key=lambda k: scores[k])
    finalists = [tried[k] for k in ranked[:FINALISTS]]
    return finalists, stopped


async def _timed_alone(inp, trials, c: Candidate, shapes, dtype, trial) -> float | None:
    """The config's geometric-mean median over the shapes, or None when pruned or failed."""
    c.stage = "race"
    logs = []
    for step, shape in enumerate(shapes):
        median, why = await time_alone(inp, trials, c, shape, dtype)
        if median is None:  # not timed: out of the sample (a refused budget says so)
            c.dropped = c.dropped or f"not timed: {why}"
            return None
        logs.append(math.log(median))
        trial.report(math.exp(sum(logs) / len(logs)), step)
        if step + 1 < len(shapes) and trial.should_prune():
            c.dropped = f"pruned by Optuna after {step + 1} of {len(shapes)} shapes"
            return None
    return math.exp(sum(logs) / len(logs))


def _state(c: Candidate, scores: dict, key: str) -> str:
    if c.dropped:
        return c.dropped[:80]
    return f"{scores[key]:.4g} ms geomean" if key in scores else c.stage


def _suggest(trial, name: str, values: tuple[Scalar, ...]) -> Scalar:
    """One dimension's value as Optuna proposes it (categorical: the values are the space's own)."""
    value = trial.suggest_categorical(name, list(values))
    assert value is not None
    return value
