"""microbench: how fast, how sure, and how far from the hardware limit.

plan (pure: the arms' code, dtype and shapes: a `Bench`) -> measure, per shape (a `timing`
job runs the candidate, and the baseline interleaved, in a sandbox worker and returns raw
nanoseconds plus the outputs of a few randomly chosen timed calls; a `reference` job
recomputes those from the input seeds and the spot-check compares them, outside the
candidate's reach: a `ShapeRun`) -> judge (pure, over the ShapeRuns: medians and the A/B
interval, the roofline under the device's measured ceilings, times below the physical
floor) -> report (summary, sweep plot, disturbances).
"""

from __future__ import annotations

from ..base import Tool, ToolContext
from ..common.peaks import device_peaks
from ..common.plot_thread import draw_async
from . import plan
from .expect_fields import EXPECT
from .judge import judge
from .measure import ShapeRun, measure_shape
from .report import cpu_counters, disturbances, plot_rows
from .schema import Input, Output


async def run(inp: Input, ctx: ToolContext) -> Output:
    bench = plan.make_bench(ctx, inp)
    count = len(bench.shapes)
    before = cpu_counters()
    runs: list[ShapeRun] = []
    ceilings, peaks_note = None, ""
    for i in range(count):
        shape_run = await measure_shape(ctx, bench, i)
        if i == 0:  # the first job's device fingerprint finds the cached peaks, or its node
            ceilings, peaks_note = await device_peaks(  # measures them
                ctx, shape_run.timing.device, node=shape_run.timing.node
            )
        runs.append(shape_run)
        await ctx.progress(i + 1, count, f"shape {i + 1}/{count} measured ({_checked(shape_run)})")
    after = cpu_counters()
    host = disturbances(ctx.sandbox.device, before, after, runs[-1].timing.threads)
    out = judge(bench, runs, ceilings, peaks_note, host)
    out.launch_config_applied = runs[0].timing.launch_config_applied or None
    if len(runs) > 1:
        png = await draw_async(_sweep_png, plot_rows(out.shapes))
        out.artifacts.append(ctx.artifact("microbench_sweep.png", png))
    return out


def _checked(shape_run: ShapeRun) -> str:
    failed = [name for name, check in shape_run.spot_checks.items() if check.status == "failed"]
    if failed:
        return f"spot-check failed: {', '.join(failed)}"
    return f"stopped on {shape_run.timing.stop_reason}"


def _sweep_png(rows: list[dict]) -> bytes:
    from ..common.plots import (
        sweep_png,
    )  # matplotlib: imported in the report thread, not on the server's path

    return sweep_png(rows)


TOOL = Tool(
    name="microbench",
    title="Microbenchmark a kernel",
    description="How fast, how sure, and how far from the hardware limit: times a kernel implementation (or "
    "your source) per shape with adaptive repetition, optionally against a baseline interleaved in the same "
    "process (the median of the paired ratios with its 95% CI, verdict faster/slower/inconclusive, minimal detectable "
    "effect), and places it on the roofline (achieved GB/s and GFLOP/s vs measured device peaks, bound class, "
    "physically-impossible flag). Outputs of randomly chosen timed calls are checked against the reference; "
    "a failed check voids the timing. Several shapes give a sweep table and a plot.",
    input_model=Input,
    output_model=Output,
    run=run,
    kernel_field="kernel",
    expect=EXPECT,
)
