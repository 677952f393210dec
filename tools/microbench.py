"""microbench: how fast, how sure, and how far from the hardware limit.

Plan: one `timing` job per shape runs the candidate (and the baseline, interleaved)
in a sandbox worker and returns raw nanoseconds plus the outputs of a few randomly
chosen timed calls. Judge, here and outside the candidate's reach: a `reference` job
recomputes those calls' outputs from the input seeds and a failed spot-check voids
the timing; statistics (tools/timing_stats.py) give medians and the A/B interval;
the roofline (tools/roofline.py) places the median under the device's measured
ceilings (tools/peaks.py) and flags times below the physical floor.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from ..kernels.schema import KernelSpec
from . import microbench_plan as plan
from .base import AgentError, Tool, ToolContext, ToolInput, ToolOutput
from .microbench_report import answer_hypothesis, cpu_counters, disturbances, sweep_plot
from .peaks import device_peaks
from .roofline import analyse, ceilings_for
from .timing_stats import compare, summarize


class Input(ToolInput):
    kernel: str = Field(description="Kernel spec name (list_kernels): gives the inputs, the reference the "
                        "spot-checks compare against, and the cost model (FLOPs, bytes) for the roofline.")
    impl: str | None = Field(default=None, description="Which of the spec's implementations to time, or "
                             "'reference'. Default: the spec's first implementation. Ignored with source/path.")
    source: str | None = Field(default=None, description="Inline Python defining the candidate (instead of impl).")
    path: str | None = Field(default=None, description="Workspace-relative file holding the candidate.")
    entry: str | None = Field(default=None, description="Function to call in source/path; takes the spec's "
                              "arguments in order, returns a tensor or a tuple of tensors.")
    baseline: str | None = Field(default=None, description="What to compare against, timed in the same job "
                                 "interleaved with the candidate: an impl name of this kernel, 'reference', or "
                                 "a previous experiment id (its code is rerun now). Omit for no A/B.")
    baseline_source: str | None = Field(default=None, description="Inline Python for the baseline.")
    baseline_path: str | None = Field(default=None, description="Workspace-relative file for the baseline.")
    baseline_entry: str | None = Field(default=None, description="Baseline function name (default: entry).")
    shapes: list[dict[str, int]] | None = Field(default=None, description="Shapes to time, e.g. "
                                                "[{'M': 4096, 'N': 4096}]; several make a sweep with a plot. "
                                                "Default: the spec's shapes for this device.")
    dtype: str | None = Field(default=None, description="Input dtype (one of the spec's dtypes; default the first).")
    budget_ms: float = Field(default=2000.0, description="Wall-clock timing budget per shape in milliseconds, "
                             "warm-up included (must be > 0). Sampling stops earlier once the median is "
                             "known to target_rel_se_pct.")
    target_rel_se_pct: float = Field(default=0.5, gt=0, description="Stop when the standard error of each "
                                     "median is below this percentage of the median.")
    flops_per_call: float | None = Field(default=None, ge=0, description="Override the spec's FLOPs per call "
                                         "(floating-point operations), applied to every shape.")
    bytes_per_call: float | None = Field(default=None, ge=0, description="Override the spec's bytes moved per "
                                         "call (bytes), applied to every shape.")
    cuda_graph: bool = Field(default=False, description="CUDA only: capture each call in a CUDA graph and time "
                             "replays (for launch-bound kernels). Fails clearly if the code cannot be captured.")


class ArmResult(BaseModel):
    code: str = Field(description="What ran: impl name, 'source', a path, or an experiment id.")
    n: int = Field(description="Timed calls (after warm-up).")
    median_ms: float = Field(description="Median time per call, ms.")
    mean_ms: float = Field(description="Mean time per call, ms (pulled up by outliers; trust the median).")
    p10_ms: float = Field(description="10th percentile, ms.")
    p90_ms: float = Field(description="90th percentile, ms.")
    iqr_ms: float = Field(description="Interquartile range, ms.")
    cv: float = Field(description="Coefficient of variation (standard deviation / mean), unitless.")
    median_rel_se_pct: float = Field(description="Standard error of the median as % of the median "
                                     "(distribution-free order-statistic formula).")
    achieved_gflops: float | None = Field(default=None, description="FLOPs per call / median time, GFLOP/s.")
    achieved_gbps: float | None = Field(default=None, description="Bytes per call / median time, GB/s.")
    pct_of_peak_flops: float | None = Field(default=None, description="% of the measured compute ceiling (dtype).")
    pct_of_peak_bandwidth: float | None = Field(default=None, description="% of the measured memory bandwidth.")
    pct_of_roofline: float | None = Field(default=None, description="Best possible time under both ceilings / "
                                          "median time, % (100 = at the roofline).")
    bound: Literal["memory", "compute", "latency"] | None = Field(default=None, description="Which limit binds: "
                                                                  "memory, compute, or latency (far from both: "
                                                                  "launch/interpreter/sync overhead).")
    is_impossible: bool = Field(default=False, description="True when the median is under the physical floor "
                                "(bytes / best bandwidth, FLOPs / best rate): the code skips work or fools the clock.")
    roofline_note: str = Field(default="", description="The roofline reading in words.")
    spot_check: Literal["passed", "failed", "skipped"] = Field(description="Outputs of randomly chosen timed calls "
                                                               "vs the reference; 'failed' voids the timing.")
    spot_check_detail: str = Field(default="", description="Which timed calls were checked and the worst error.")


class ShapeResult(BaseModel):
    shape: dict[str, int] = Field(description="The named sizes of this case.")
    dtype: str = Field(description="Input dtype.")
    flops_per_call: float = Field(description="FLOPs per call used for the roofline.")
    bytes_per_call: float = Field(description="Bytes moved per call used for the roofline.")
    stop_reason: str = Field(description="'target_se' (medians known to the target), 'budget' (time ran out "
                             "first) or 'max_samples'.")
    warmup_calls: int = Field(description="Untimed warm-up calls per arm.")
    warmup_stable: bool = Field(description="False when times were still drifting when warm-up ran out.")
    num_input_sets: int = Field(description="Input sets rotated across calls (sized to overflow the cache).")
    candidate: ArmResult
    baseline: ArmResult | None = None
    ratio: float | None = Field(default=None, description="median(candidate) / median(baseline): < 1 faster.")
    ci_low: float | None = Field(default=None, description="95% CI of the ratio, lower end (paired block bootstrap).")
    ci_high: float | None = Field(default=None, description="95% CI of the ratio, upper end.")
    min_detectable_effect_pct: float | None = Field(default=None, description="Smallest change (%) this noise "
                                                    "level detects 80% of the time; smaller claims are noise.")
    verdict: Literal["faster", "slower", "inconclusive", "invalid", "measured"] = Field(
        description="A/B verdict for this shape; 'measured' without a baseline; 'invalid' when a spot-check "
        "failed or a time is physically impossible.")


class Output(ToolOutput):
    verdict: Literal["faster", "slower", "inconclusive", "mixed", "invalid", "measured"] = Field(
        description="Over all shapes: the common verdict, 'mixed' when shapes disagree.")
    shapes: list[ShapeResult] = Field(description="One entry per shape, in the order given.")
    device: dict = Field(description="The device fingerprint the worker reported (name, cores, torch, ...).")
    clocks: dict = Field(description="Clock readings when readable (CPU MHz, GPU SM clock).")
    ceilings: dict = Field(description="The peaks used for the roofline, with their source (measured/datasheet).")
    timer: str = Field(description="How each call was timed.")
    disturbances: list[str] = Field(description="What besides the code could have moved the numbers.")
    hypothesis_answer: str = Field(default="", description="Whether the evidence supports the hypothesis.")


async def run(inp: Input, ctx: ToolContext) -> Output:
    if not inp.budget_ms > 0:
        raise AgentError(f"budget_ms must be > 0 (got {inp.budget_ms}); 2000 is a good default on CPU, "
                         "200-500 on a GPU")
    kernel = plan.kernel_of(ctx, inp.kernel)
    spec: KernelSpec = kernel.spec
    device = plan.device_of(ctx)
    if inp.cuda_graph and device != "cuda":
        raise AgentError("cuda_graph=true needs a CUDA device; jobs here run on the CPU. Drop cuda_graph")
    dtype = plan.dtype_of(spec, inp.dtype)
    shapes = plan.shapes_of(spec, inp.shapes, device)
    job_memory = getattr(getattr(ctx.sandbox, "limits", None), "memory_bytes", None)
    for shape in shapes:
        plan.check_memory(spec, shape, dtype, job_memory)
    arms = [plan.candidate_code(ctx, kernel, inp)]
    baseline = plan.baseline_code(ctx, kernel, inp)
    if baseline is not None:
        arms.append(baseline)

    before = cpu_counters()
    results, raw_device, peaks_note, ceilings, timer, threads = [], {}, "", None, "", None
    for i, shape in enumerate(shapes):
        raw, out_dir = await plan.time_shape(ctx, kernel, arms, shape, dtype, device, i, len(shapes), inp)
        raw_device, timer, threads = raw["device"], str(raw.get("timer", "")), raw.get("threads")
        if ceilings is None:
            ceilings, peaks_note = await device_peaks(ctx, raw_device)
        checks = await plan.spot_check(ctx, kernel, raw, out_dir, shape, dtype, arms, i)
        results.append(_judge(spec, inp, shape, dtype, raw, arms, checks, ceilings, i))
        await ctx.progress(i + 1, len(shapes), f"shape {i + 1}/{len(shapes)} done: {results[-1].verdict}")
    after = cpu_counters()

    out = Output(
        verdict=_overall([r.verdict for r in results]), shapes=results, device=raw_device,
        clocks=dict(raw.get("clocks") or {}),
        ceilings={**{k: v for k, v in (ceilings or {}).items() if k not in ("device", "clocks")}, "note": peaks_note},
        timer=timer, disturbances=disturbances(device, before, after, threads),
    )
    if len(results) > 1:
        out.artifacts.append(ctx.artifact("microbench_sweep.png", sweep_plot(_plot_rows(results))))
    bounds = [(",".join(f"{k}={v}" for k, v in r.shape.items()), r.candidate.bound)
              for r in results if r.candidate.bound]
    mdes = [r.min_detectable_effect_pct for r in results if r.min_detectable_effect_pct is not None]
    out.hypothesis_answer = answer_hypothesis(inp.hypothesis, out.verdict if baseline else None, bounds,
                                              max(mdes) if mdes else None)
    out.summary = _summary(spec.name, arms, results, out) + (f" Hypothesis: {out.hypothesis_answer}."
                                                             if out.hypothesis_answer else "")
    return out


def _judge(spec: KernelSpec, inp: Input, shape: dict, dtype: str, raw: dict, arms: list, checks: dict,
           ceilings_record: dict | None, index: int) -> ShapeResult:
    itemsize = plan.itemsize(dtype)
    flops = float(inp.flops_per_call if inp.flops_per_call is not None else spec.flops(shape))
    bytes_moved = float(inp.bytes_per_call if inp.bytes_per_call is not None else spec.bytes(shape, itemsize))
    ceilings = ceilings_for(ceilings_record, dtype) if ceilings_record else None
    arm_results = {}
    for code in arms:
        samples = raw["arms"][code.name]["samples_ns"]
        s = summarize(samples)
        res = ArmResult(code=code.label, n=s.n, median_ms=s.median_ns / 1e6, mean_ms=s.mean_ns / 1e6,
                        p10_ms=s.p10_ns / 1e6, p90_ms=s.p90_ns / 1e6, iqr_ms=s.iqr_ns / 1e6, cv=s.cv,
                        median_rel_se_pct=100 * s.median_rel_se, **checks[code.name])
        if ceilings is not None and (flops > 0 or bytes_moved > 0):
            roof = analyse(res.median_ms, flops, bytes_moved, ceilings)
            res = res.model_copy(update=dict(
                achieved_gflops=roof.achieved_gflops, achieved_gbps=roof.achieved_gbps,
                pct_of_peak_flops=roof.pct_of_peak_flops, pct_of_peak_bandwidth=roof.pct_of_peak_bandwidth,
                pct_of_roofline=100 * roof.roofline_ms / res.median_ms, bound=roof.bound,
                is_impossible=roof.is_impossible, roofline_note=roof.explanation))
        arm_results[code.name] = res
    cand, base = arm_results["candidate"], arm_results.get("baseline")
    result = ShapeResult(shape=shape, dtype=dtype, flops_per_call=flops, bytes_per_call=bytes_moved,
                         stop_reason=str(raw["stop_reason"]), warmup_calls=int(raw["warmup"]["calls_per_arm"]),
                         warmup_stable=bool(raw["warmup"]["stable"]), num_input_sets=int(raw["num_input_sets"]),
                         candidate=cand, baseline=base, verdict="measured")
    if base is not None:
        cmp = compare(raw["arms"]["baseline"]["samples_ns"], raw["arms"]["candidate"]["samples_ns"], seed=index)
        result.ratio, result.ci_low, result.ci_high = cmp.ratio, cmp.ci_low, cmp.ci_high
        result.min_detectable_effect_pct, result.verdict = cmp.min_detectable_effect_pct, cmp.verdict
    if any(a.spot_check == "failed" or a.is_impossible for a in arm_results.values()):
        result.verdict = "invalid"
    return result


def _overall(verdicts: list[str]) -> str:
    kinds = set(verdicts)
    if "invalid" in kinds:
        return "invalid"
    return verdicts[0] if len(kinds) == 1 else "mixed"  # e.g. faster at large sizes, inconclusive at small


def _plot_rows(results: list[ShapeResult]) -> list[dict]:
    rows = []
    for r in results:
        for arm, res in (("candidate", r.candidate), ("baseline", r.baseline)):
            if res is not None:
                rows.append({"arm": f"{arm} ({res.code})", "bytes": max(r.bytes_per_call, 1.0),
                             "median_ms": res.median_ms, "p10_ms": res.p10_ms, "p90_ms": res.p90_ms,
                             "pct_roofline": res.pct_of_roofline})
    return rows


def _summary(name: str, arms: list, results: list[ShapeResult], out: Output) -> str:
    last = results[-1]
    shape = ",".join(f"{k}={v}" for k, v in last.shape.items())
    cand = last.candidate
    where = (f"{cand.bound}-bound at {cand.pct_of_roofline:.3g}% of the roofline"
             if cand.pct_of_roofline is not None else "no roofline (ceilings unavailable)")
    text = f"{name}/{arms[0].label} {last.dtype}, {len(results)} shape(s): median {cand.median_ms:.4g} ms at {shape}, {where}."
    if out.verdict == "invalid":
        bad = [f"{a.code}: {why}" for r in results for a in (r.candidate, r.baseline) if a
               for why, hit in (("spot-check failed", a.spot_check == "failed"), ("impossible time", a.is_impossible))
               if hit]
        return text + f" INVALID timing ({'; '.join(sorted(set(bad)))})."
    if len(arms) > 1:
        faster = sum(r.verdict == "faster" for r in results)
        slower = sum(r.verdict == "slower" for r in results)
        text += (f" vs {arms[1].label}: {out.verdict} (faster on {faster}, slower on {slower} of {len(results)}); "
                 f"at {shape} ratio {last.ratio:.3f} [95% CI {last.ci_low:.3f}, {last.ci_high:.3f}], "
                 f"minimal detectable effect {last.min_detectable_effect_pct:.1f}%.")
    if not math.isfinite(cand.median_ms):
        text += " (no finite median)"
    return text


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
    read_only=True,
    idempotent=False,
    open_world=False,
)
