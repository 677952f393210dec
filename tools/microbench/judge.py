"""microbench, step 3: statistics, roofline and the verdict for one shape, from raw
nanoseconds the timing job returned (form-checked by jobs.py) and the spot-check.
"""

from __future__ import annotations

from ...kernels.schema import ITEMSIZE, KernelSpec
from ..common.stats import compare, summarize
from .plan import Code
from .roofline import Ceilings, analyse, ceilings_for
from .schema import ArmResult, Input, ShapeResult


def shape_result(spec: KernelSpec, inp: Input, shape: dict, dtype: str, raw: dict, arms: list[Code], checks: dict,
                 ceilings_record: dict | None, index: int) -> ShapeResult:
    flops = float(inp.flops_per_call if inp.flops_per_call is not None else spec.flops(shape))
    bytes_moved = float(inp.bytes_per_call if inp.bytes_per_call is not None
                        else spec.bytes(shape, ITEMSIZE[dtype]))
    ceilings = ceilings_for(ceilings_record, dtype) if ceilings_record else None
    arm_results = {code.name: _arm_result(code, raw["arms"][code.name]["samples_ns"], checks[code.name],
                                          flops, bytes_moved, ceilings) for code in arms}
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


def _arm_result(code: Code, samples_ns: list[int], check: dict, flops: float, bytes_moved: float,
                ceilings: Ceilings | None) -> ArmResult:
    s = summarize(samples_ns)
    res = ArmResult(code=code.label, n=s.n, median_ms=s.median_ns / 1e6, mean_ms=s.mean_ns / 1e6,
                    p10_ms=s.p10_ns / 1e6, p90_ms=s.p90_ns / 1e6, iqr_ms=s.iqr_ns / 1e6, cv=s.cv,
                    median_rel_se_pct=100 * s.median_rel_se, **check)
    if ceilings is None or not (flops > 0 or bytes_moved > 0):
        return res
    roof = analyse(res.median_ms, flops, bytes_moved, ceilings)
    return res.model_copy(update=dict(
        achieved_gflops=roof.achieved_gflops, achieved_gbps=roof.achieved_gbps,
        pct_of_peak_flops=roof.pct_of_peak_flops, pct_of_peak_bandwidth=roof.pct_of_peak_bandwidth,
        pct_of_roofline=100 * roof.roofline_ms / res.median_ms, bound=roof.bound,
        is_impossible=roof.is_impossible, roofline_note=roof.explanation))


def overall(verdicts: list[str]) -> str:
    kinds = set(verdicts)
    if "invalid" in kinds:
        return "invalid"
    if len(kinds) == 1:
        return verdicts[0]
    return "mixed"  # e.g. faster at large sizes, inconclusive at small
