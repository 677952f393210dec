"""microbench: how fast, how sure, and how far from the hardware limit.

plan (pure: the code of each arm, shapes, payloads) -> jobs (one `timing` job per shape
runs the candidate, and the baseline interleaved, in a sandbox worker and returns raw
nanoseconds plus the outputs of a few randomly chosen timed calls; a `reference` job
recomputes those outputs from the input seeds) -> judge (outside the candidate's
reach: the spot-check, medians and the A/B interval, the roofline under the device's
measured ceilings, times below the physical floor) -> report (summary, sweep plot,
disturbances).
"""

from __future__ import annotations

import anyio

from ..base import AgentError, Tool, ToolContext
from ..common.peaks import device_peaks
from ..common.tolerance import resolve_tolerance
from . import jobs, plan
from .expect_fields import CATALOGUE, facts
from .judge import overall, shape_result
from .report import cpu_counters, disturbances, page_fault_notes, plot_rows, summary
from .schema import Input, Output


async def run(inp: Input, ctx: ToolContext) -> Output:
    kernel = plan.kernel_of(ctx, inp.kernel)
    spec = kernel.spec
    device = ctx.sandbox.device
    if inp.cuda_graph and device != "cuda":
        raise AgentError("cuda_graph=true needs a CUDA device; jobs here run on the CPU. Drop cuda_graph")
    dtype = plan.dtype_of(spec, inp.dtype)
    shapes = plan.shapes_of(spec, inp.shapes, device)
    for shape in shapes:
        plan.check_memory(spec, shape, dtype, ctx.sandbox.limits.memory_bytes)
    arms = [plan.candidate_code(ctx, kernel, inp)]
    baseline = plan.baseline_code(ctx, kernel, inp)
    if baseline is not None:
        arms.append(baseline)

    before = cpu_counters()
    results, raw, ceilings, peaks_note, faults, compiles = [], {}, None, "", [], 0
    for i, shape in enumerate(shapes):
        payload = plan.timing_payload(ctx, kernel, arms, shape, dtype, i, inp)
        raw, out_dir = await jobs.time_shape(ctx, arms, payload, shape, device, i, len(shapes), inp)
        if ceilings is None:
            ceilings, peaks_note = await device_peaks(ctx, raw["device"])
        checks = await _spot_check(ctx, kernel, raw, out_dir, shape, dtype, arms)
        results.append(shape_result(spec, inp, shape, dtype, raw, arms, checks, ceilings, i))
        faults += page_fault_notes(shape, arms, raw)
        compiles += raw["_compiles"]
        await ctx.progress(i + 1, len(shapes), f"shape {i + 1}/{len(shapes)} done: {results[-1].verdict}")
    after = cpu_counters()

    out = Output(
        verdict=overall([r.verdict for r in results]), shapes=results, device=raw["device"],
        clocks=dict(raw.get("clocks") or {}),
        ceilings={**{k: v for k, v in (ceilings or {}).items() if k not in ("device", "clocks")}, "note": peaks_note},
        timer=str(raw.get("timer", "")),
        disturbances=disturbances(device, before, after, raw.get("threads")) + faults, triton_compiles=compiles,
    )
    if len(results) > 1:
        png = await anyio.to_thread.run_sync(_sweep_png, plot_rows(results))
        out.artifacts.append(ctx.artifact("microbench_sweep.png", png))
    out.summary = summary(spec.name, arms, results, out.verdict)
    return out


async def _spot_check(ctx: ToolContext, kernel, raw: dict, out_dir, shape: dict, dtype: str, arms) -> dict:
    wanted, sets = plan.spot_check_calls(raw, arms)
    ref_dir = None
    if wanted and out_dir is not None:
        payload = plan.spot_reference_payload(ctx, kernel, shape, dtype, sets, raw["_seeds"])
        ref_dir = await jobs.run_spot_reference(ctx, payload, kernel.spec.name)
    tol = resolve_tolerance(dtype, kernel.spec.tolerances, None)
    return await anyio.to_thread.run_sync(_judge_spot_checks, arms, wanted, sets, out_dir, ref_dir, tol)


def _sweep_png(rows: list[dict]) -> bytes:
    from ..common.plots import sweep_png  # matplotlib: imported in the report thread, not on the server's path

    return sweep_png(rows)


def _judge_spot_checks(*args) -> dict:
    from .spot_check import judge_spot_checks  # torch: imported in the judge thread, not on the server's path

    return judge_spot_checks(*args)


TOOL = Tool(
    name="microbench",
    title="Microbenchmark a kernel",
    description="How fast, how sure, and how far from the hardware limit: times a kernel implementation (or "
    "your source) per shape with adaptive repetition, optionally against a baseline interleaved in the same "
    "process (ratio of medians with a 95% bootstrap CI, verdict faster/slower/inconclusive, minimal detectable "
    "effect), and places it on the roofline (achieved GB/s and GFLOP/s vs measured device peaks, bound class, "
    "physically-impossible flag). Outputs of randomly chosen timed calls are checked against the reference; "
    "a failed check voids the timing. Several shapes give a sweep table and a plot.",
    input_model=Input,
    output_model=Output,
    run=run,
    kernel_field="kernel",
    expect_catalogue=CATALOGUE,
    expect_facts=facts,
)
