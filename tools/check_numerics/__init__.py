"""check_numerics: does the candidate compute the same function as the reference, honestly?

plan (pure: candidate, reference, cases, seeds, tolerances, partition, lock) -> jobs (a
`reference` job writes seeded inputs and float64 reference outputs; one `numerics_run`
job per case runs the candidate on them: NaN-prefilled outputs, reused buffers, a
repeat, simulated TP ranks, op audit) -> judge (errors, findings and the case verdict,
computed outside the candidate's process, in a worker thread) -> report (summary line,
worst cases, error histogram).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import anyio

from ...sandbox import TRUSTED_ZOO, make_owned, sweep_dead_owners
from ..base import Tool, ToolContext
from ..common.launch_config import LaunchConfigApplied
from ..common.seeds import trial_seed
from . import jobs
from .answers import RefFacts
from .expect_fields import EXPECT
from .layouts import layout_findings, layout_probes
from .plan import Plan, make_plan
from .report import summary, worst_json
from .schema import CHECKS, Input, LockReport, Output
from .verdict import lock_findings, overall

if TYPE_CHECKING:
    import numpy as np

    from .judge import CaseJudgement  # torch: the judge thread imports it, never the server's path


async def run(inp: Input, ctx: ToolContext) -> Output:
    sandbox = ctx.sandbox
    device = sandbox.device
    plan = make_plan(
        inp,
        ctx.workspace,
        sandbox,
        device,
        lambda c, t: trial_seed(ctx.workspace.state_dir, ctx.experiment_id, c, t),
    )
    enabled = set(inp.checks if inp.checks is not None else CHECKS)
    total = len(plan.cases) + 1
    await ctx.progress(0, total, "reference")
    ref = await jobs.run_reference(sandbox, plan, inp.timeout_s)
    findings = lock_findings(plan.notes)
    reports, series, partition_rows = [], {}, {}
    with _kept_references(ctx) as keep:
        ref_dir = jobs.keep_reference_files(ref.out_dir, plan, keep)
        judged, compiles, applied = await _run_cases(
            ctx, plan, ref_dir, ref.facts, enabled, inp.timeout_s, total
        )
    seen: dict[int, set[str]] = {}  # finding codes per as-made case
    for case, judgement in zip(plan.cases, judged, strict=True):
        if case.base is None:
            seen[case.index] = {f.code for f in judgement.findings}
            findings += judgement.findings
        else:  # a layout case says only what its as-made case did not
            findings += [f for f in judgement.findings if f.code not in seen.get(case.base, ())]
        reports.append(judgement.report)
        partition_rows[case.label] = judgement.partition_row
        if judgement.errors is not None:
            series[case.label] = judgement.errors
    failing_alone, probe_compiles, total = await _probe_layouts(
        ctx, plan, reports, enabled, inp.timeout_s, total
    )
    findings += layout_findings(plan, reports, failing_alone)
    verdict = overall(reports, findings)
    artifacts = [ctx.artifact("worst_cases.json", worst_json(reports, partition_rows))]
    if (
        series
    ):  # drawn off the reply's path: matplotlib costs more than the rest of a one-case check
        artifacts.append(ctx.artifact_later("error_histogram.png", partial(_histogram_png, series)))
    await ctx.progress(total, total, f"verdict {verdict}")
    lock = (
        None
        if plan.lock is None
        else LockReport(locked=plan.lock.locked, locked_at=plan.lock.locked_at, problems=plan.notes)
    )
    return Output(
        verdict=verdict,
        candidate=plan.candidate_name,
        device=device,
        cases=reports,
        findings=findings,
        lock=lock,
        checks=sorted(enabled),
        artifacts=artifacts,
        triton_compiles=ref.compiles + compiles + probe_compiles,
        launch_config_applied=applied,
        layout_notes=plan.layout_notes,
        summary=summary(plan.what_ran, verdict, reports, findings),
    )


# The reference job's files, kept while the cases run (job folders are pruned as jobs start), in
# <workspace state>/check-numerics/: named for this server, so that the next call removes what a
# server killed mid-call left (reference tensors can be hundreds of MB).
KEEP_PARENT, KEEP_PREFIX = "check-numerics", "references-"


@contextlib.contextmanager
def _kept_references(ctx: ToolContext) -> Iterator[Path]:
    parent = ctx.workspace.state_dir / KEEP_PARENT
    sweep_dead_owners(KEEP_PREFIX, parent)
    keep = make_owned(KEEP_PREFIX, parent)
    try:
        yield keep
    finally:
        shutil.rmtree(keep, ignore_errors=True)


async def _run_cases(
    ctx: ToolContext,
    plan: Plan,
    ref_dir: Path,
    ref_facts: dict[str, RefFacts],
    enabled: set[str],
    timeout_s: float,
    total: int,
    done: int = 0,
) -> tuple[list[CaseJudgement], int, LaunchConfigApplied | None]:
    """Every case's job at once (the sandbox's slots decide how many run together), each judged as
    it finishes; results in plan order. As if run in order: a failing case stops the cases after
    it, the ones before it finish, and the earliest failure is the error."""
    judged: list[CaseJudgement | None] = [None] * len(plan.cases)
    failures: dict[int, Exception] = {}
    compiles = [0] * len(plan.cases)
    applied: list[LaunchConfigApplied | None] = [None] * len(plan.cases)
    scopes = [anyio.CancelScope() for _ in plan.cases]
    group = cache_group(ctx, plan)

    async def run_and_judge(i: int, case) -> None:
        with scopes[i]:
            try:
                run = await jobs.run_case(
                    plan, case, ctx.sandbox, ref_dir, enabled, timeout_s, group
                )
                compiles[i] = run.compiles
                applied[i] = run.launch_config_applied
                # torch work on possibly large tensors: off the event loop, so the server keeps serving
                judged[i] = await anyio.to_thread.run_sync(
                    _judge_case, plan, case, run, ref_dir, ref_facts, enabled, ctx.sandbox.device
                )
            except Exception as exc:  # noqa: BLE001 - re-raised below, unwrapped, the earliest first
                failures[i] = exc
                for later in scopes[i + 1 :]:
                    later.cancel()

    async with anyio.create_task_group() as tasks:
        for i, case in enumerate(plan.cases):
            await ctx.progress(done + i + 1, total, f"case {case.label}")
            tasks.start_soon(run_and_judge, i, case)
    if failures:
        raise failures[min(failures)]
    judgements = [j for j in judged if j is not None]  # all of them: none failed
    return judgements, sum(compiles), applied[0]


async def _probe_layouts(
    ctx: ToolContext, plan: Plan, reports: list, enabled: set[str], timeout_s: float, total: int
) -> tuple[dict[int, list[int]], int, int]:
    """Where a layout case with several arguments re-laid failed (and its as-made case passed),
    each argument re-laid alone (layouts.layout_probes): its own reference job and one job per
    probe. Returns failing layout case index -> the arguments whose probe fails, the Triton
    compiles the probes made, and the call's progress total with the probes; nothing runs
    when no layout case failed."""
    probes = layout_probes(plan, reports)
    if not probes:
        return {}, 0, total
    sub = dataclasses.replace(plan, cases=[p.case for p in probes])
    done, total = total, total + len(probes) + 1
    await ctx.progress(done, total, "a layout failed: re-laying its arguments one at a time")
    ref = await jobs.run_reference(ctx.sandbox, sub, timeout_s)
    with _kept_references(ctx) as keep:
        ref_dir = jobs.keep_reference_files(ref.out_dir, sub, keep)
        judged, compiles, _ = await _run_cases(
            ctx, sub, ref_dir, ref.facts, enabled, timeout_s, total, done
        )
    failing_alone: dict[int, list[int]] = {p.of: [] for p in probes}
    for probe, judgement in zip(probes, judged, strict=True):
        if judgement.report.verdict == "fail":
            failing_alone[probe.of].append(probe.arg)
    return failing_alone, ref.compiles + compiles, total


def cache_group(ctx: ToolContext, plan: Plan) -> str:
    """The candidate's jobs of this call share one Triton cache (never the reference's, never another
    call's); the built-in zoo's own kernels share a trusted one across calls (only zoo code runs there)."""
    if ctx.workspace.is_embedded and plan.candidate.get("source") is None:
        return TRUSTED_ZOO
    return f"{ctx.experiment_id}:candidate"


def _judge_case(*args) -> CaseJudgement:
    from . import (
        judge,
    )  # torch-heavy: imported in the judge thread, never on the server's import path

    return judge.judge_case(*args)


def _histogram_png(series: dict[str, np.ndarray]) -> bytes:
    from ..common.plots import (
        histogram_png,
    )  # matplotlib: imported in the plot thread, not on the server's path

    return histogram_png(series)


TOOL = Tool(
    name="check_numerics",
    title="Check numerics and integrity",
    description="Does a kernel compute the same function as its reference, honestly? Runs the candidate on fresh "
    "seeded inputs per trial, compares with a float64 reference outside its process (max abs/rel, rel L2, ULP, "
    "mismatch indices, NaN/Inf) against a documented tolerance, and reports integrity findings: unwritten output, "
    "input mutation, aliasing, tensor subclasses, nondeterminism, result caching, forbidden/library ops, a "
    "Triton kernel that launched nothing, lower precision, bfloat16 in the CPU interpreter (a suspect), and "
    "partitioned (simulated tensor-parallel) vs unpartitioned divergence. Inputs reach the candidate exactly as "
    "the spec makes them (strides, storage offset, views of one storage); the smallest shape of each dtype also "
    "runs with inputs re-laid out (layouts=, default padded_rows), and a failure only there is layout_sensitive. "
    "A case whose candidate raises keeps "
    "its error (file:line:col) and the other cases their results. Tolerance (relative "
    "L2): the tolerance argument, else the kernel spec's, else the dtype table (float64 1e-12, float32 1e-5, tf32 "
    "5e-4, float16 1e-3, bfloat16 1e-2); a human-locked kernel cannot pass with a changed reference or a looser "
    "tolerance.",
    input_model=Input,
    output_model=Output,
    run=run,
    kernel_field="kernel",
    expect=EXPECT,
)
