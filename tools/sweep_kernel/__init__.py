"""sweep_kernel: which launch config of a kernel is fastest per shape, and how sure.

plan (the space, shapes, dtype, target; constraints checked against compile_kernel's catalogue
before anything runs) -> compile every config for the target, in parallel (stages.py) -> the
numerics gate (stages.py) -> per shape, race the survivors (race.py) -> the answer (report.py).
A space over the cap is sampled by Optuna instead (sample.py), and its finalists race.

Every step is a child call of another tool (compile_kernel, check_numerics, microbench), so
each trial is an experiment of its own in the ledger, with its code snapshot, and the sweep is
resumable (tools/common/sweep.py). The budget ends a sweep with a partial answer, never a timeout.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal

from ...kernels.coderef import default_impl, parse_python, resolve_code
from ...kernels.workspace import Kernel, WorkspaceError
from ..base import AgentError, Tool, ToolContext, as_agent_error
from ..common.expect import ExpectError, check
from ..common.sweep import (
    MAX_GRID_POINTS,
    Budget,
    Space,
    Trials,
    label,
    mixed_devices,
    wall_clock,
)
from ..compile_kernel.expect_fields import EXPECT as COMPILE_EXPECT
from ..compile_kernel.plan import resolve_target
from ..microbench.plan import candidate_code, dtype_of, kernel_of, shapes_of
from .expect_fields import EXPECT
from .race import Race, is_refusal, new_race, race
from .report import best_config, config_results, csv_rows, plot_panels, shape_winners, summary
from .sample import sample
from .schema import Input, Output
from .stages import Candidate, compile_all, numerics_gate


@dataclass(frozen=True)
class Plan:
    """Everything resolved and checked before the first call: what to sweep, where, over what."""

    inp: Input  # with the spec's default impl filled in
    dtype: str
    device: str  # where timing runs: "cuda" or "cpu"
    target: str  # what every config compiles for
    shapes: list[dict]
    space: Space


def make_plan(inp: Input, ctx: ToolContext) -> Plan:
    kernel = kernel_of(ctx, inp.kernel)
    candidate_code(ctx, kernel, inp)  # the code's own errors first (a path outside the workspace)
    if inp.source is None and inp.path is None:
        inp = inp.model_copy(update={"impl": inp.impl or default_impl(kernel)})
    try:
        check(
            inp.constraints,
            COMPILE_EXPECT.catalogue,
            has_baseline=False,
            described_at="the resource expect://compile_kernel",
        )
    except ExpectError as exc:
        raise AgentError(f"constraints: {exc}") from None
    space = Space.of(inp.space, inp.configs)
    _refuse_entry_arguments(ctx, kernel, inp, space)
    device = ctx.sandbox.device
    return Plan(
        inp=inp,
        dtype=dtype_of(kernel.spec, inp.dtype),
        device=device,
        target=resolve_target(inp.target).name,
        shapes=shapes_of(kernel.spec, inp.shapes, device),
        space=space,
    )


def _refuse_entry_arguments(ctx: ToolContext, kernel: Kernel, inp: Input, space: Space) -> None:
    """A config name the entry already receives as one of the kernel's inputs (passed by
    position) would reach it twice ("got multiple values for argument"): refused before any call."""
    with as_agent_error(WorkspaceError):
        ref = resolve_code(
            ctx.workspace,
            kernel=kernel,
            impl=inp.impl,
            source=inp.source,
            path=inp.path,
            entry=inp.entry,
            allow_reference=True,
        )
    inputs = {a.name for a in kernel.spec.args}
    try:
        tree = parse_python(ref.text())
    except (SyntaxError, OSError, ValueError):
        tree = None  # the gates will say what is wrong with the code
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == ref.entry:
            params = [*node.args.posonlyargs, *node.args.args]
            inputs |= {a.arg for a in params[: len(kernel.spec.args)]}
    clash = [n for n in space.names if n in inputs]
    if clash:
        raise AgentError(
            f"the space names {', '.join(map(repr, clash))}: an argument {ref.entry or 'the entry'} "
            f"already receives as one of {kernel.spec.name}'s inputs, so a config would pass it "
            "twice; name the tl.constexpr or keyword parameter to vary instead"
        )


async def run(inp: Input, ctx: ToolContext) -> Output:
    given = inp.model_dump(mode="json", exclude_unset=True)  # as the agent gave them: for resume
    plan = make_plan(inp, ctx)
    budget = Budget.of(inp.budget)
    # a budget refusal is replayed on resume: the retry it estimated is then the recorded call
    trials = Trials.for_sweep(ctx, "sweep_kernel", inp.resume, given, refusal=is_refusal)
    trials.budget = budget
    sampler: Literal["grid", "optuna"] = "grid" if plan.space.size <= MAX_GRID_POINTS else "optuna"
    candidates: list[Candidate] = []  # filled as the sweep goes: a cut sweep answers with them
    races: list[Race] = []
    stopped: str | None = None
    # The wall budget ends the calls still running too (their sandbox jobs are killed, their
    # ledger rows closed as errors): the answer is partial, never late.
    with wall_clock(budget, "sweep_kernel") as clock:
        stopped = await _sweep(plan, ctx, trials, budget, sampler, candidates, races)
    if clock.cancelled_caught:
        stopped = (
            f"the wall-clock budget ({budget.wall_s:g} s) is spent: the calls still running "
            "were ended (errors in the ledger), and nothing after them started"
        )
    for shape in plan.shapes[len(races) :]:  # shapes the budget left unraced
        races.append(new_race(shape, []))
    for r in races:
        if not r.finished:
            r.stopped = r.stopped or stopped
    return _answer(plan, ctx, sampler, candidates, races, stopped, trials)


async def _sweep(
    plan: Plan,
    ctx: ToolContext,
    trials: Trials,
    budget: Budget,
    sampler: Literal["grid", "optuna"],
    candidates: list[Candidate],
    races: list[Race],
) -> str | None:
    """The gates and the races, appending to `candidates` and `races` as it goes; why it
    stopped early, or None."""
    inp, shapes, dtype = plan.inp, plan.shapes, plan.dtype

    async def progress(done: float, total: float, message: str) -> None:
        await ctx.progress(done, total, f"{message} · {budget.eta(int(total - done))}")

    stopped: str | None = None
    if sampler == "grid":
        candidates += [Candidate(c) for c in plan.space.grid()]
        chosen = candidates[: budget.trials] if budget.trials else candidates
        if len(chosen) < len(candidates):
            stopped = (
                f"the trial budget ({budget.trials}) is smaller than the space ({plan.space.size})"
            )
        budget.done = len(chosen)
        # a compile and a numerics check per config, then a first racing round per shape
        trials.expected = 2 * len(chosen) + len(shapes) * max(len(chosen) - 1, 1)
        await compile_all(inp, trials, chosen, shapes[0], dtype, budget)
        await numerics_gate(inp, trials, chosen, shapes, dtype, budget)
        stopped = stopped or budget.wall_spent()
        finalists = [c for c in chosen if c.alive]
    else:
        finalists, stopped = await sample(
            inp, trials, plan.space, shapes, dtype, budget, progress, candidates
        )
    for c in finalists:
        c.stage = "race"
    for shape in shapes:
        races.append(new_race(shape, finalists))
        await race(inp, trials, races[-1], dtype, budget)
        stopped = stopped or races[-1].stopped
    return stopped


def _answer(
    plan: Plan,
    ctx: ToolContext,
    sampler: Literal["grid", "optuna"],
    candidates: list[Candidate],
    races: list[Race],
    stopped: str | None,
    trials: Trials,
) -> Output:
    inp, space = plan.inp, plan.space
    winners = shape_winners(races)
    rows = config_results(candidates, plan.shapes)
    best, best_ms = best_config(rows, winners)
    tried = sum(1 for c in candidates if c.stage != "not_tried")
    candidate = inp.impl if inp.source is None and inp.path is None else (inp.path or "source")
    out = Output(
        kernel=inp.kernel,
        candidate=candidate or "",
        dtype=plan.dtype,
        target=plan.target,
        device=plan.device,
        sampler=sampler,
        space_size=space.size,
        tried=tried,
        seen_fraction=tried / space.size,
        compiled=sum(
            1 for c in candidates if c.stage != "not_tried" and not _dropped_at(c, "compile")
        ),
        passed_numerics=sum(
            1
            for c in candidates
            if c.stage == "race" or (c.stage == "numerics" and c.dropped is None)
        ),
        shapes=winners,
        best=best,
        best_geomean_ms=best_ms,
        configs=rows,
        complete=stopped is None,
        stopped_because=stopped,
        trials_made=trials.made,
        trials_reused=trials.reused,
        trials_remeasured=trials.changed_code,
        timing_ms=sum(r.timing_ms for r in races),
        summary=summary(
            inp.kernel, candidate or "", plan.dtype, plan.device, tried, space.size, winners, best
        ),
    )
    if stopped:
        out.summary = f"{out.summary} Partial: {stopped}."
    if trials.changed_code:
        out.summary += (
            f" {trials.changed_code} recorded trial(s) measured again: their code changed since."
        )
    out.mixed_devices = mixed_devices(
        {label(c.config): c.devices for c in candidates if c.devices},
        "the medians, the winners and the best config",
        "pin timing jobs to one kind ([cluster.resources] timing with an accelerator type in "
        "infra-agent.toml) to time them all on one kind of device",
    )
    if out.mixed_devices:
        out.summary += f" Mixed devices: {out.mixed_devices}."
    out.artifacts.append(ctx.artifact("sweep.csv", csv_rows(rows, winners)))
    panels = plot_panels(rows, winners)
    if any(p["bars"] for p in panels):
        out.artifacts.append(ctx.artifact_later("sweep.png", lambda: _png(panels)))
    return out


def _dropped_at(c: Candidate, stage: str) -> bool:
    return c.stage == stage and c.dropped is not None


def _png(panels: list[dict]) -> bytes:
    from ..common.plots import sweep_configs_png  # matplotlib: in the late-artifact thread

    return sweep_configs_png(panels)


TOOL = Tool(
    name="sweep_kernel",
    title="Sweep a kernel's launch configs",
    description="Which launch config (constexprs such as BLOCK_N, and num_warps/num_stages) of a kernel "
    "is fastest per shape, and how sure: compiles every config of a space for a GPU target ahead of "
    "time (in parallel; no GPU needed) and drops those that fail or break your constraints (the expect "
    "language over compile_kernel's fields), checks the rest against the reference (check_numerics) and "
    "drops wrong ones, then races the survivors per shape with microbench (interleaved A/B against the "
    "leader, rounds with doubling budgets drop configs whose ratio CI excludes being as fast). Answers "
    "per shape the winner and the configs it could not be told from, the best config across shapes "
    "(geometric mean), what was dropped and why, a CSV and a plot. A winner is always a config timed "
    "on its shape; a shape the race could not decide (budget, rounds, a pair microbench could not "
    "time) says why in undecided_because. Spaces over "
    f"{MAX_GRID_POINTS} configs are sampled with Optuna (TPE, successive-halving pruning). Every trial is "
    "an experiment in the ledger (experiment://<sweep id> lists them); resume=<id> continues a sweep "
    "without re-measuring; a budget ends it with a partial answer (the wall budget ends the calls "
    "still running too).",
    input_model=Input,
    output_model=Output,
    run=run,
    kernel_field="kernel",
    expect=EXPECT,
)
