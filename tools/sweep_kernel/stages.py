"""The two gates before a config is timed: it compiles for the target within the constraints, and
it computes the right answer. Each config's check is a child call (compile_kernel, then
check_numerics) through the sweep's Trials, so each is an experiment of its own and a resumed
sweep reuses it.

Both gates fan out as wide as the executor can run their jobs without sharing a device
(`Sandbox.capacity`): compiles as Triton's own autotuner compiles its configs, ahead of time,
as many at once as there are compile slots (2 on this host; every node's CPUs on a Ray cluster);
numerics checks one per device (one at a time on a CPU host, where two would share its cores;
one per GPU, or per node of a cluster).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import anyio

from ..common.expect import HypothesisAnswer, summary_line
from ..common.sweep import Budget, Config, Trials
from .schema import Input


@dataclass
class Candidate:
    """One config on its way through the sweep: where it is, why it left, what it cost."""

    config: Config
    stage: str = "not_tried"  # compile -> numerics -> race
    dropped: str | None = None
    compile_facts: dict = field(default_factory=dict)  # the first kernel's resources
    times: dict[str, list[float]] = field(default_factory=dict)  # shape_key -> medians seen, ms

    @property
    def medians(self) -> dict[str, float]:
        """Per shape, the median of the medians its timed calls gave (each pair, or alone), ms."""
        return {k: statistics.median(v) for k, v in self.times.items() if v}

    def timed(self, shape: dict, median_ms: float) -> None:
        self.times.setdefault(shape_key(shape), []).append(median_ms)

    trials: list[str] = field(default_factory=list)  # child experiment ids
    devices: set[str] = field(default_factory=set)  # fingerprints of the devices that timed it

    @property
    def alive(self) -> bool:
        return self.dropped is None and self.stage != "not_tried"


def code_arguments(inp: Input) -> dict:
    """What names the candidate's code, as every child tool takes it."""
    args: dict = {"kernel": inp.kernel}
    if inp.source is not None:
        args["source"] = inp.source
    elif inp.path is not None:
        args["path"] = inp.path
    else:
        args["impl"] = inp.impl
    if inp.entry is not None and ("source" in args or "path" in args):
        args["entry"] = inp.entry
    return {k: v for k, v in args.items() if v is not None}


async def compile_all(
    inp: Input,
    trials: Trials,
    candidates: list[Candidate],
    shape: dict,
    dtype: str,
    budget: Budget,
) -> None:
    """Compile every candidate for the target; drop failures and broken constraints. Once the
    budget is spent the rest stay untried."""
    limiter = anyio.CapacityLimiter(trials.ctx.sandbox.capacity("compile"))

    async def one(c: Candidate) -> None:
        async with limiter:
            if budget.wall_spent() is None:
                await _compile(inp, trials, c, shape, dtype)

    async with anyio.create_task_group() as group:
        for c in candidates:
            group.start_soon(one, c)


async def _compile(inp: Input, trials: Trials, c: Candidate, shape: dict, dtype: str) -> None:
    args = {
        **code_arguments(inp),
        "launch_config": c.config,
        "shape": shape,
        "dtype": dtype,
        **({"target": inp.target} if inp.target else {}),
        **({"expect": inp.constraints} if inp.constraints else {}),
    }
    trial = await trials.call("compile_kernel", args)
    c.stage = "compile"
    c.trials.append(trial.outcome.experiment_id)
    if not trial.outcome.ok:
        c.dropped = f"compile failed: {trial.outcome.error}"
        return
    kernels = trial.result.get("kernels") or []
    c.compile_facts = dict(kernels[0]) if kernels else {}
    if (why := _unlaunchable(kernels, trial.result.get("target"))) is not None:
        c.dropped = why
        return
    answer = HypothesisAnswer.model_validate(trial.result.get("hypothesis_answer") or {})
    if answer.answer == "contradicted":
        c.dropped = "breaks a constraint: " + summary_line(answer).removeprefix("Expect: ")


def _unlaunchable(kernels: list[dict], target: str | None) -> str | None:
    """Why the target cannot launch a kernel of this config, from compile_kernel's own occupancy
    (0 blocks per SM: threads per block, shared memory or registers over the target's limits),
    or None. Ahead of time, so a CPU host drops it too: it would fail with OutOfResources."""
    for k in kernels:
        occupancy = k.get("occupancy") or {}
        if occupancy.get("blocks_per_sm") == 0:
            return (
                f"cannot launch on {target or 'the target'}: {k.get('name')}'s "
                f"{occupancy.get('limiting_factor')} per block exceeds what one SM/CU offers "
                f"({k.get('threads_per_block')} threads per block, "
                f"{k.get('registers_per_thread')} registers per thread, "
                f"{k.get('shared_memory_bytes')} B shared memory)"
            )
    return None


async def numerics_gate(
    inp: Input,
    trials: Trials,
    candidates: list[Candidate],
    shapes: list[dict],
    dtype: str,
    budget: Budget,
) -> None:
    """Check each compiled candidate against the reference on every shape; drop failures, and
    those left unchecked when the budget is spent (an unchecked config is never timed)."""
    limiter = anyio.CapacityLimiter(trials.ctx.sandbox.capacity("run"))

    async def one(c: Candidate) -> None:
        async with limiter:
            await _check(inp, trials, c, shapes, dtype, budget)

    async with anyio.create_task_group() as group:
        for c in candidates:
            if c.alive:
                group.start_soon(one, c)


async def _check(
    inp: Input, trials: Trials, c: Candidate, shapes: list[dict], dtype: str, budget: Budget
) -> None:
    if (why := budget.wall_spent()) is not None:
        c.dropped = f"not checked: {why}"
        return
    args = {
        **code_arguments(inp),
        "launch_config": c.config,
        "shapes": shapes,
        "dtypes": [dtype],
        "trials": inp.numerics_trials,
    }
    trial = await trials.call("check_numerics", args)
    c.stage = "numerics"
    c.trials.append(trial.outcome.experiment_id)
    if not trial.outcome.ok:
        c.dropped = f"check_numerics failed to run: {trial.outcome.error}"
    elif trial.result.get("verdict") != "pass":
        codes = [f.get("code") for f in trial.result.get("findings") or []]
        c.dropped = (
            f"numerics {trial.result.get('verdict')}: "
            f"{trial.result.get('summary', '')[:300]}"
            + (f" (findings: {', '.join(str(x) for x in codes)})" if codes else "")
        )


def shape_key(shape: dict) -> str:
    """A shape as a short key: M=4,N=64."""
    return ",".join(f"{k}={v}" for k, v in shape.items())
