"""sweep_serve: which engine config serves the most under an SLO, and the front it draws.

plan (the configs, checked against EngineArgs; each step's serve_benchmark arguments, each with
prompts of its own; what would refuse every step, checked before any engine starts; the keys a
resumed sweep finds earlier steps by) -> ladder (per config, within the budget: launch_serve, one
serve_benchmark per step until the SLO breaks or the engine is over-saturated, stop_serve; steps
judged by steps.py) -> answer (per config the highest load meeting the SLO, the Pareto front, the
findings) -> race (the two leading configs side by side: the best config, a tie or undecided).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import partial

import anyio

from ..base import Tool, ToolContext
from ..common.sweep import Budget, Trials, csv_text, wall_clock
from . import answer, plan, race, steps
from .expect_fields import EXPECT
from .ladder import Climb, climb
from .schema import ConfigAnswer, Dropped, Input, Output

# What a resumed sweep must share with the one it continues (the budget and objective may differ)
SAME = ("engine", "base_args", "space", "configs", "workload", "ladder", "slo", "repeats")


async def run(inp: Input, ctx: ToolContext) -> Output:
    planned = plan.configs(inp)  # bad names and empty or over-cap spaces: refused before any call
    plan.precheck(inp, ctx)  # what would refuse every step: before any engine starts
    given = inp.model_dump(mode="json", exclude_unset=True)
    free = frozenset(Input.model_fields) - set(SAME)  # how far to go and how to decide, not what
    trials = Trials.for_sweep(
        ctx, "sweep_serve", inp.resume, {k: given.get(k) for k in SAME}, may_differ=free
    )
    plan.remember_steps(trials)
    budget = Budget.of(inp.budget)
    # on a cluster, configs whose engines need `resources` run side by side, as many as the live
    # nodes hold (one per node or GPU); on the server's host, one at a time
    width = ctx.sandbox.engines_at_once(inp.resources) if inp.resources else 1
    climbs: dict[int, Climb] = {}
    note: str | None = None
    queue = list(enumerate(planned))
    finished = in_flight = 0

    async def worker() -> None:
        nonlocal note, finished, in_flight
        while queue:
            # the configs still climbing count against a trial budget (they may yet be free)
            ahead = replace(budget, done=budget.done + in_flight)
            if (why := ahead.spent()) is not None:
                note = note or why
                return
            i, config = queue.pop(0)
            in_flight += 1
            await ctx.progress(
                finished, len(planned), f"config {i + 1}/{len(planned)}: {config.label}"
            )
            before = finished

            async def report(share: float, message: str, i=i, config=config, before=before) -> None:
                await ctx.progress(
                    before + share * 0.99,  # under the count a finished config reports
                    len(planned),
                    f"config {i + 1}/{len(planned)} {config.label}: {message}",
                )

            result = climbs[i] = Climb()  # kept, whatever it measured, if the budget ends it
            await climb(inp, config, trials, budget, report, result)
            budget.done += result.launch_id is not None  # a config answered from the ledger is free
            finished, in_flight = finished + 1, in_flight - 1
            status = (
                "dropped: its engine did not start"
                if result.launch_error is not None
                else result.stopped
            )
            await ctx.progress(
                finished,
                len(planned),
                f"{config.label}: {status}; {budget.eta(len(planned) - finished)}",
            )

    contest: race.Contest | None = None
    # The wall budget ends the calls still running too (an engine's launch, a serve_benchmark:
    # their jobs ended, their ledger rows closed as errors saying the budget ended them, every
    # engine up stopped): the answer is partial, never late, and keeps what was measured.
    with wall_clock(budget, "sweep_serve") as clock:
        async with anyio.create_task_group() as group:
            for _ in range(min(width, len(planned))):
                group.start_soon(worker)
        configs, dropped = _configs(inp, planned, climbs)
        ranked = answer.ranked(inp, configs)
        if inp.race_rounds and len(ranked) >= 2:
            by_label = {p.label: p for p in planned}
            leader, challenger = ranked[0], ranked[1]

            async def race_report(share: float, message: str) -> None:
                await ctx.progress(len(planned) + share, len(planned) + 1, message)

            contest = race.contest(
                inp, (by_label[leader.label], leader), (by_label[challenger.label], challenger)
            )
            await race.race(inp, contest, trials, budget, race_report)
    ended = (
        f"the wall-clock budget ({budget.wall_s:g} s) is spent: the calls still running were "
        "ended (errors in the ledger; their engines stopped)"
    )
    for result in climbs.values():
        if not result.finished:
            result.cut_mid_call(ended)
            note = note or ended
    configs, dropped = _configs(inp, planned, climbs)  # with the cuts, if the budget ended one
    not_tried = [config.config for _, config in queue]
    children = [e for i in sorted(climbs) for e in climbs[i].children]
    cut = any(c.budget_cut for c in climbs.values())
    front = answer.front(configs)
    best = answer.best(inp, configs)
    verdict = None
    if contest is not None:
        if clock.cancelled_caught and not contest.budget_cut and contest.decision is None:
            contest.cut_mid_call(inp.race_rounds, ended)
        verdict = race.answer(inp, contest)
        children += verdict.experiment_ids
        best = next(c for c in configs if c.label == verdict.winner)
        if verdict.budget_cut:  # the race's verdict is undecided for want of time: partial
            cut = True
            note = note or (
                f"the race was cut after {verdict.rounds} of {inp.race_rounds} rounds: "
                f"{budget.wall_spent() or 'the wall-clock budget is spent'}"
            )
    out = Output(
        load_kind=inp.ladder.kind,
        configs=configs,
        front=front,
        best=best.label if best else None,
        best_config=best.config if best else None,
        best_value=answer.objective(inp, best) if best else None,
        dropped=dropped,
        not_tried=not_tried,
        partial=bool(not_tried) or cut,
        budget_note=note or (budget.spent() if cut else None),
        slo_judged=plan.slo_judged(inp.slo),
        interval_note=answer.interval_note(inp.repeats),
        trials=children,
        measured_steps=sum(not s.reused for c in configs for s in c.steps),
        reused_steps=sum(s.reused for c in configs for s in c.steps),
        remeasured_steps=trials.changed_code,
        num_configs=len(planned),
        mixed_devices=answer.devices(configs),
        race=verdict,
        decided=verdict is not None and verdict.outcome == "decided",
        findings=answer.sweep_findings(configs) + answer.not_run(climbs, planned),
    )
    rows = answer.csv_rows(configs, {p.experiment_id for p in front})
    if rows:
        out.artifacts.append(ctx.artifact("sweep.csv", csv_text(rows)))
        load = "requests in flight" if inp.ladder.kind == "concurrency" else "requests/s"
        series = answer.plot_steps(configs, list(inp.slo))
        front_xy = [(p.output_throughput_per_user, p.output_throughput) for p in front]
        limits: dict[str, float | None] = {k[:-3]: v for k, v in inp.slo.items()}
        limits = limits or {"ttft_p50": None}
        out.artifacts.append(
            ctx.artifact_later("sweep.png", partial(_png, series, front_xy, load, limits))
        )
    out.summary = _summary(inp, out)
    return out


def _configs(
    inp: Input, planned: list[plan.Planned], climbs: dict[int, Climb]
) -> tuple[list[ConfigAnswer], list[Dropped]]:
    """The climbs so far as the answer's configs (in the plan's order, whatever finished first)
    and the configs dropped because their engine did not start."""
    configs, dropped = [], []
    for i, config in enumerate(planned):
        if i not in climbs:
            continue
        result = climbs[i]
        if result.launch_error is not None:
            dropped.append(
                Dropped(
                    config=config.config,
                    label=config.label,
                    reason=result.launch_error,
                    experiment_id=result.launch_id,
                )
            )
        else:
            configs.append(answer.config_answer(config, result, inp.ladder.kind))
    return configs, dropped


def _png(steps: list[dict], front: list, load: str, limits: dict[str, float | None]) -> bytes:
    from ..common.plots import serve_sweep_png  # matplotlib: in the plot thread only

    return serve_sweep_png(steps, front, load, limits)


def _summary(inp: Input, out: Output) -> str:
    unit = "in flight" if inp.ladder.kind == "concurrency" else "req/s"
    head = f"{len(out.configs)} of {out.num_configs} configs measured"
    if out.dropped:
        head += f", {len(out.dropped)} dropped (engine did not start)"
    measured = sum(len(c.steps) for c in out.configs)
    if out.best is None and not measured and out.configs:
        why = "; ".join(f"{c.label}: {c.stopped}" for c in out.configs)
        head += f"; no step ran ({why})"
    elif out.best is None and measured and not any(s.counts for c in out.configs for s in c.steps):
        head += (
            "; no config judged: every step measured was kept out of the SLO verdicts (what it "
            "measured was the host, not the engine: findings say why)"
        )
    elif out.best is None:
        head += "; no config met the SLO at any step that counts"
    else:
        best = next(c for c in out.configs if c.label == out.best)
        head += (
            f"; best by {inp.objective}: {out.best} (up to {best.highest_load:g} {unit} within "
            f"the SLO, goodput {best.goodput or 0:.2f} req/s, {best.output_throughput or 0:.0f} "
            f"output tokens/s); front of {len(out.front)} points"
        )
        unjudged = [c.label for c in out.configs if c.steps and not any(s.counts for s in c.steps)]
        if out.race is not None:
            head += f"; race against the runner-up {out.race.runner_up}: {out.race.why}"
        elif len([c for c in out.configs if c.highest_load is not None]) >= 2:
            head += "; undecided: no race (race_rounds=0), the ladders' pick"
        elif unjudged:  # the others were never judged, so nothing beat them: not a winner
            head += (
                f"; undecided: {', '.join(unjudged)} had no step that counts (every step kept "
                f"out of the SLO verdicts), so no config was compared with {out.best}: it is "
                "the only one judged, not a winner. Measure again on a quieter host"
            )
    carried = Counter(
        steps.code(f) for c in out.configs for s in c.steps for f in dict.fromkeys(s.findings)
    )
    if carried:
        listed = ", ".join(f"{code} in {n}" for code, n in carried.most_common())
        head += f"; steps' findings: {listed} step(s) (configs[].findings)"
    kept_out = sum(bool(s.excluded) for c in out.configs for s in c.steps)
    if kept_out:
        head += (
            f"; {kept_out} step(s) kept out of the SLO verdicts "
            "(findings and configs[].steps[].excluded say why)"
        )
    if out.not_tried:
        head += f"; partial: {out.budget_note}, {len(out.not_tried)} configs not tried "
        head += "(resume=<this id> continues)"
    elif out.partial:
        head += f"; partial: {out.budget_note} (resume=<this id> continues)"
    if out.remeasured_steps:
        head += (
            f"; {out.remeasured_steps} recorded call(s) measured again: their code changed since"
        )
    if out.mixed_devices:
        head += f"; {out.mixed_devices}"
    return head


TOOL = Tool(
    name="sweep_serve",
    title="Sweep a serving engine's configs",
    description="Search an engine's config space (launch_serve args: max_num_seqs, "
    "max_num_batched_tokens, ...) under an SLO: per config, start the engine, climb a load "
    "ladder (concurrencies or rates) with serve_benchmark until the SLO breaks or the engine is "
    "over-saturated (throughput flat while TTFT rises), stop it. Answers per config the highest "
    "load meeting the SLO with goodput and tokens/s (total and per user), the Pareto front "
    "(tokens/s per user vs in all), what was dropped; a CSV and a plot. Every step sends "
    "prompts the engine has not seen (checked with its own prefix-cache counter); a step that "
    "measured a warm cache, a starved load generator or one wave is kept out of the verdicts, "
    "and every step's findings are in the answer. The best config is decided by a race: the "
    "two leading configs measured side by side, alternating, at the deciding load, until the "
    "paired ratio's interval excludes 1 (decided), lies within tie_margin_pct (a tie) or the "
    "rounds end (undecided). Every launch and benchmark is a child experiment; a budget ends "
    "it with a partial answer (the wall budget ends the calls still running too), and "
    "resume=<id> continues without measuring a step twice.",
    input_model=Input,
    output_model=Output,
    run=run,
    read_only=False,
    expect=EXPECT,
)
