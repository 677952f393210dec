"""check_numerics: the finding a failure in some layouts only earns (`layout_sensitive`).

A layout case (plan._layout_cases) holds the same values as its as-made case, only
other strides; so when the as-made case passes and the layout case fails, the kernel
reads or writes memory by a layout it assumed, not the one it was given.
"""

from __future__ import annotations

from .plan import Case, Plan
from .schema import CaseReport, Finding, InputLayout


def layout_findings(plan: Plan, reports: list[CaseReport]) -> list[Finding]:
    by_index = {c.index: (c, r) for c, r in zip(plan.cases, reports)}
    found = []
    for case, report in zip(plan.cases, reports):
        if case.base is None or report.verdict != "fail":
            continue
        base_case, base = by_index[case.base]
        if base.verdict != "pass":
            continue  # it fails as made too: a layout is not what tells them apart
        found.append(
            Finding(
                code="layout_sensitive",
                severity="error",
                case=report.case,
                message=_message(plan, case, report, base_case, base),
            )
        )
    return found


def _message(plan: Plan, case: Case, report: CaseReport, base_case: Case, base: CaseReport) -> str:
    names = [plan.args[j]["name"] for j in case.layout_args if j < len(plan.args)]
    made = {x.name: x for x in base.input_layouts}
    moved = [x for x in report.input_layouts if x.name in names]
    what = "raised" if report.error else _error_words(report)
    shapes = [base_case.shape]
    return (
        f"passes with the inputs as made ({base.case}) but {what} with layout {case.layout!r}, "
        f"the same values at other strides: argument(s) {', '.join(names)} re-laid out: "
        + "; ".join(_strides(x, made.get(x.name)) for x in moved)
        + ". The kernel assumes a layout it was not given (e.g. a row stride computed from the "
        "shape instead of x.stride(0), or a pointer from x.data_ptr() without the storage "
        "offset). Next: take every stride from the tensor (pass x.stride(i) to the kernel); if "
        "it truly needs this argument packed, declare Arg(..., layout='contiguous') in the spec "
        "(say why) and make it contiguous at the call site. Reproduce: check_numerics(kernel="
        f"{plan.kernel!r}, shapes={shapes}, dtypes=[{case.dtype!r}], layouts=[{case.layout!r}]); "
        "to find which argument, declare layout='contiguous' on all but one (args=)"
    )


def _strides(now: InputLayout, made: InputLayout | None) -> str:
    before = f" (as made {tuple(made.stride)}, offset {made.storage_offset})" if made else ""
    return (
        f"{now.name} {tuple(now.shape)} strides {tuple(now.stride)}, offset "
        f"{now.storage_offset}{before}"
    )


def _error_words(report: CaseReport) -> str:
    e = report.errors
    if e is None:
        return "gives no usable output"
    rel = "undefined" if e.rel_l2_error is None else f"{e.rel_l2_error:.3g}"
    nonfinite = (
        f"{e.nonfinite_mismatches} NaN/Inf where the reference is finite (the padding holds NaN), "
        if e.nonfinite_mismatches
        else ""
    )
    return f"fails ({nonfinite}rel L2 {rel} vs tolerance {report.tolerance_rel_l2:.3g})"
