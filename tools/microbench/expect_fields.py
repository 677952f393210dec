"""What microbench's `expect` conditions may name: per-shape times with their uncertainty, and the baseline arm.

A time carries an interval, so a claim the noise cannot decide is inconclusive. In an A/B run
`median_ms` spans the ratio's paired 95% CI times the baseline's median (and `baseline.median_ms`
is taken as exact), so `median_ms <= 0.95 * baseline.median_ms` is judged exactly as the bootstrap
interval of the ratio against 0.95; alone, it spans the median +- 1.96 standard errors.
"""

from __future__ import annotations

from ..common.expect import Catalogue, ExpectFields, Facts, Measured
from .schema import ArmResult, Input, Output, ShapeResult

Z_95 = 1.96
# Arm fields a condition may name (also as baseline.<field>), straight from ArmResult.
ARM_FIELDS = (
    "n",
    "median_ms",
    "mean_ms",
    "p10_ms",
    "p90_ms",
    "iqr_ms",
    "cv",
    "median_rel_se_pct",
    "achieved_gflops",
    "achieved_gbps",
    "pct_of_peak_flops",
    "pct_of_peak_bandwidth",
    "pct_of_roofline",
    "bound",
    "is_impossible",
    "spot_check",
)
TIME_FIELDS = (
    "median_ms",
    "mean_ms",
    "p10_ms",
    "p90_ms",
    "iqr_ms",
    "achieved_gflops",
    "achieved_gbps",
    "pct_of_peak_flops",
    "pct_of_peak_bandwidth",
    "pct_of_roofline",
)

_MEDIAN_NOTE = (
    " Carries an interval: in an A/B run the ratio's 95% CI times the baseline's median, else "
    "median +- 1.96 standard errors; a threshold inside it is inconclusive."
)
CATALOGUE = Catalogue(
    fields={
        "verdict": Output.model_fields["verdict"].description,
        "num_shapes": "Shapes timed.",
        "disturbances": Output.model_fields["disturbances"].description,
        "triton_compiles": Output.model_fields["triton_compiles"].description,
    },
    scoped={
        **{
            name: ArmResult.model_fields[name].description
            + (_MEDIAN_NOTE if name == "median_ms" else "")
            for name in ARM_FIELDS
        },
        "ratio": (
            "median of the paired ratios candidate/baseline, < 1 faster; carries its 95% CI (of "
            "the same statistic)."
        ),
        "min_detectable_effect_pct": ShapeResult.model_fields[
            "min_detectable_effect_pct"
        ].description,
        "shape_verdict": ShapeResult.model_fields["verdict"].description,
        "stop_reason": ShapeResult.model_fields["stop_reason"].description,
        "warmup_stable": ShapeResult.model_fields["warmup_stable"].description,
    },
    scope_kind="shape",
)


def facts(inp: Input, out: Output, evidence: None) -> Facts:
    fields = {
        "verdict": out.verdict,
        "num_shapes": len(out.shapes),
        "disturbances": out.disturbances,
        "triton_compiles": out.triton_compiles,
    }
    scopes, baseline_scopes = {}, {}
    for r in out.shapes:
        label = " ".join(f"{k}={v}" for k, v in r.shape.items()) + f" {r.dtype}"
        scopes[label] = _shape_fields(r)
        if r.baseline is not None:
            baseline_scopes[label] = _arm_fields(r.baseline, valid=r.verdict != "invalid")
    baseline = Facts(scopes=baseline_scopes) if inp.has_baseline() else None
    return Facts(fields=fields, scopes=scopes, baseline=baseline)


def _shape_fields(r: ShapeResult) -> dict:
    valid = (
        r.verdict != "invalid"
    )  # a failed spot-check or an impossible time: its numbers decide nothing
    arm = _arm_fields(r.candidate, valid)
    arm["median_ms"] = _median(r) if valid else None
    ratio = (
        Measured(r.ratio, r.ci_low, r.ci_high)
        if valid and None not in (r.ratio, r.ci_low, r.ci_high)
        else None
    )
    return {
        **arm,
        "ratio": ratio,
        "min_detectable_effect_pct": r.min_detectable_effect_pct,
        "shape_verdict": r.verdict,
        "stop_reason": r.stop_reason,
        "warmup_stable": r.warmup_stable,
    }


def _arm_fields(arm: ArmResult, valid: bool) -> dict:
    values = {name: getattr(arm, name) for name in ARM_FIELDS}
    if not valid:
        values.update(dict.fromkeys(TIME_FIELDS))
    return values


def _median(r: ShapeResult) -> Measured:
    median = r.candidate.median_ms
    if r.baseline is not None and r.ci_low is not None and r.ci_high is not None:
        base = r.baseline.median_ms
        return Measured(median, r.ci_low * base, r.ci_high * base)
    half = Z_95 * r.candidate.median_rel_se_pct / 100 * median
    return Measured(median, median - half, median + half)


EXPECT = ExpectFields(CATALOGUE, facts)
