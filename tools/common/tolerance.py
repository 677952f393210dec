"""The tolerance table and how a case's tolerance is chosen (no torch: plans use it).

The error metrics it is applied to live in tools/common/error_metrics.py.

THE TOLERANCE TABLE (relative L2 error, ||candidate - reference|| / ||reference||, with
the reference computed in float64). A case passes when its worst trial's relative L2
error is within the tolerance, no element is NaN/Inf where the reference is finite, and
(when given) the max absolute error is within max_abs. Precedence: an explicit
`tolerance` argument, else the kernel spec's per-dtype Tolerance, else this table.

| dtype    | rel L2 | why                                                                      |
|----------|--------|--------------------------------------------------------------------------|
| float64  | 1e-12  | unit roundoff 2^-53 ~ 1.1e-16, with room for reductions of ~1e6 terms    |
| float32  | 1e-5   | unit roundoff 2^-24 ~ 6e-8; fp32 reductions over K terms grow ~sqrt(K)x  |
| tf32     | 5e-4   | float32 storage, 10-bit mantissa products: 2^-11 ~ 4.9e-4 per operand    |
| float16  | 1e-3   | one output rounding 2^-11 ~ 4.9e-4 plus fp32-accumulated work, ~2x       |
| bfloat16 | 1e-2   | one output rounding 2^-8 ~ 3.9e-3 plus fp32-accumulated work, ~2.5x      |

"tf32" is accepted as a case dtype: inputs and outputs are float32, judged against the
tf32 row (a kernel that declares TF32 math). An element "mismatches" when its error
exceeds tolerance x (|reference| + rms(reference)): judged against its own magnitude,
and against the output's scale where the reference is near zero.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_TOLERANCES: dict[str, tuple[float, str]] = {
    "float64": (1e-12, "float64 default: unit roundoff 2^-53 with room for long reductions"),
    "float32": (1e-5, "float32 default: unit roundoff 2^-24 ~ 6e-8, reductions grow ~sqrt(K)"),
    "tf32": (5e-4, "tf32 default: 10-bit mantissa operands, 2^-11 ~ 4.9e-4"),
    "float16": (1e-3, "float16 default: one output rounding 2^-11 ~ 4.9e-4, ~2x headroom"),
    "bfloat16": (1e-2, "bfloat16 default: one output rounding 2^-8 ~ 3.9e-3, ~2.5x headroom"),
}

# Formats with fewer mantissa bits than a declared dtype: what "lower precision" means.
LOWER_PRECISION = {
    "float64": ("float32",),
    "float32": ("tf32", "bfloat16", "float16"),
    "tf32": ("bfloat16",),
}


@dataclass(frozen=True)
class ResolvedTolerance:
    rel_l2: float
    source: str  # "argument" | "spec" | "dtype default" | "lock"
    why: str
    max_abs: float | None = None


def resolve_tolerance(
    dtype: str, spec_tolerances: dict | None, argument: float | None
) -> ResolvedTolerance:
    if argument is not None:
        return ResolvedTolerance(argument, "argument", "given by the caller")
    tol = (spec_tolerances or {}).get(dtype)
    if tol is not None:
        return ResolvedTolerance(tol.rel_l2, "spec", tol.why, tol.max_abs)
    if dtype not in DTYPE_TOLERANCES:
        raise KeyError(dtype)
    rel_l2, why = DTYPE_TOLERANCES[dtype]
    return ResolvedTolerance(rel_l2, "dtype default", why)
