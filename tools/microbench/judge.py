"""microbench, step 3: statistics, roofline and the verdict, from the measured shapes alone
(`ShapeRun`s: the parsed timing job and the spot-check). Pure: the same runs give the same
answer, and nothing here runs a job or reads the host."""

from __future__ import annotations

from collections.abc import Sequence

from ...kernels.schema import ITEMSIZE
from ..common.stats import compare, summarize
from .measure import ShapeRun, SpotCheck
from .plan import Bench, Code
from .report import page_fault_notes, summary
from .roofline import Ceilings, analyse, ceilings_for
from .schema import ArmResult, Output, ShapeResult


def judge(
    bench: Bench,
    runs: Sequence[ShapeRun],
    ceilings: dict | None,
    peaks_note: str,
    host_notes: list[str],
) -> Output:
    """The answer (without artifacts): `ceilings` is the device's peaks record (None: no
    roofline), `host_notes` what the host's load was while timing (report.disturbances)."""
    results = [judge_shape(bench, run, ceilings) for run in runs]
    # one sandbox times every shape, so the device is the same; clocks are read per job and the
    # last shape's are the nearest to the answer
    last = runs[-1].timing
    faults = [
        note for run in runs for note in page_fault_notes(run.shape, bench.arms, run.timing.arms)
    ]
    peaks = {k: v for k, v in (ceilings or {}).items() if k not in ("device", "clocks")}
    verdict = overall([r.verdict for r in results])
    return Output(
        verdict=verdict,
        shapes=results,
        device=last.device,
        clocks=dict(last.clocks),
        ceilings={**peaks, "note": peaks_note},
        timer=last.timer,
        disturbances=host_notes + faults,
        triton_compiles=sum(r.timing.compiles for r in runs),
        summary=summary(bench.spec.name, bench.arms, results, verdict),
    )


def judge_shape(bench: Bench, run: ShapeRun, ceilings_record: dict | None) -> ShapeResult:
    inp, spec, dtype, timing = bench.inp, bench.spec, bench.dtype, run.timing
    flops = float(inp.flops_per_call if inp.flops_per_call is not None else spec.flops(run.shape))
    bytes_moved = float(
        inp.bytes_per_call
        if inp.bytes_per_call is not None
        else spec.bytes(run.shape, ITEMSIZE[dtype])
    )
    ceilings = ceilings_for(ceilings_record, dtype) if ceilings_record else None
    arm_results = {
        code.name: _arm_result(
            code,
            timing.arms[code.name].samples_ns,
            run.spot_checks[code.name],
            flops,
            bytes_moved,
            ceilings,
        )
        for code in bench.arms
    }
    cand, base = arm_results["candidate"], arm_results.get("baseline")
    result = ShapeResult(
        shape=run.shape,
        dtype=dtype,
        flops_per_call=flops,
        bytes_per_call=bytes_moved,
        stop_reason=timing.stop_reason,
        warmup_calls=timing.warmup_calls,
        warmup_stable=timing.warmup_stable,
        num_input_sets=timing.num_input_sets,
        candidate=cand,
        baseline=base,
        verdict="measured",
    )
    if base is not None:
        cmp = compare(
            timing.arms["baseline"].samples_ns, timing.arms["candidate"].samples_ns, seed=run.index
        )
        result.ratio, result.ci_low, result.ci_high = cmp.ratio, cmp.ci_low, cmp.ci_high
        result.min_detectable_effect_pct, result.verdict = (
            cmp.min_detectable_effect_pct,
            cmp.verdict,
        )
    if any(a.spot_check == "failed" or a.is_impossible for a in arm_results.values()):
        result.verdict = "invalid"
    return result


def _arm_result(
    code: Code,
    samples_ns: Sequence[int],
    check: SpotCheck,
    flops: float,
    bytes_moved: float,
    ceilings: Ceilings | None,
) -> ArmResult:
    s = summarize(samples_ns)
    res = ArmResult(
        code=code.label,
        n=s.n,
        median_ms=s.median_ns / 1e6,
        mean_ms=s.mean_ns / 1e6,
        p10_ms=s.p10_ns / 1e6,
        p90_ms=s.p90_ns / 1e6,
        iqr_ms=s.iqr_ns / 1e6,
        cv=s.cv,
        median_rel_se_pct=100 * s.median_rel_se,
        spot_check=check.status,
        spot_check_detail=check.detail,
    )
    if ceilings is None or not (flops > 0 or bytes_moved > 0):
        return res
    roof = analyse(res.median_ms, flops, bytes_moved, ceilings)
    return res.model_copy(
        update=dict(
            achieved_gflops=roof.achieved_gflops,
            achieved_gbps=roof.achieved_gbps,
            pct_of_peak_flops=roof.pct_of_peak_flops,
            pct_of_peak_bandwidth=roof.pct_of_peak_bandwidth,
            pct_of_roofline=100 * roof.roofline_ms / res.median_ms,
            bound=roof.bound,
            is_impossible=roof.is_impossible,
            roofline_note=roof.explanation,
        )
    )


def overall(verdicts: list[str]) -> str:
    kinds = set(verdicts)
    if "invalid" in kinds:
        return "invalid"
    if len(kinds) == 1:
        return verdicts[0]
    return "mixed"  # e.g. faster at large sizes, inconclusive at small
