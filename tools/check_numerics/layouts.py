"""check_numerics: the finding a failure in some layouts only earns (`layout_sensitive`).

A layout case (plan._layout_cases) holds the same values as its as-made case, only
other strides; so when the as-made case passes and the layout case fails, the kernel
reads or writes memory by a layout it assumed, not the one it was given.

Which argument's layout it assumed: a layout case re-lays every argument that accepts the
layout at once, so where one with several such arguments fails, each is re-laid alone in
a probe case (`layout_probes`, same seeds); the finding names the arguments whose probe
fails. Probes run only after such a failure, and are not cases of the answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .plan import Case, Plan
from .schema import CaseReport, Finding, InputLayout


@dataclass(frozen=True)
class Probe:
    """One argument re-laid alone, to tell whether its layout makes `of` fail."""

    of: int  # the failing layout case's index
    arg: int  # the argument's index in plan.args
    case: Case  # `of` with only `arg` re-laid out


def failing_layout_cases(plan: Plan, reports: list[CaseReport]) -> list[Case]:
    """The layout cases that fail where their as-made case passes."""
    by_index = {c.index: r for c, r in zip(plan.cases, reports)}
    return [
        case
        for case, report in zip(plan.cases, reports)
        if case.base is not None
        and report.verdict == "fail"
        # a failure as made too: a layout is not what tells them apart
        and by_index[case.base].verdict == "pass"
    ]


def layout_probes(plan: Plan, reports: list[CaseReport]) -> list[Probe]:
    """A probe per re-laid argument of each failing layout case that re-laid more than one."""
    probes = []
    for case in failing_layout_cases(plan, reports):
        if len(case.layout_args) < 2:
            continue  # one argument re-laid: it is the one
        for j in case.layout_args:
            i = len(plan.cases) + len(probes)
            probe = dataclasses.replace(
                case, index=i, keys=[f"c{i}t{t}" for t in range(len(case.seeds))], layout_args=[j]
            )
            probes.append(Probe(of=case.index, arg=j, case=probe))
    return probes


def layout_findings(
    plan: Plan, reports: list[CaseReport], failing_alone: dict[int, list[int]] | None = None
) -> list[Finding]:
    """`failing_alone`: failing layout case index -> the arguments (indices) whose probe fails
    (layout_probes); a case missing from it and re-laying several arguments was not probed."""
    by_index = {c.index: (c, r) for c, r in zip(plan.cases, reports)}
    found = []
    for case in failing_layout_cases(plan, reports):
        report = by_index[case.index][1]
        base_case, base = by_index[case.base]
        alone = (
            case.layout_args
            if len(case.layout_args) == 1
            else (failing_alone or {}).get(case.index)
        )
        found.append(
            Finding(
                code="layout_sensitive",
                severity="error",
                case=report.case,
                message=_message(plan, case, report, base_case, base, alone),
            )
        )
    return found


def _message(
    plan: Plan,
    case: Case,
    report: CaseReport,
    base_case: Case,
    base: CaseReport,
    alone: list[int] | None,
) -> str:
    def name(j: int) -> str:
        return plan.args[j]["name"] if j < len(plan.args) else f"#{j}"

    names = [name(j) for j in case.layout_args]
    made = {x.name: x for x in base.input_layouts}
    moved = [x for x in report.input_layouts if x.name in names]
    what = "raised" if report.error else _error_words(report)
    shapes = [base_case.shape]
    return (
        f"passes with the inputs as made ({base.case}) but {what} with layout {case.layout!r}, "
        f"the same values at other strides: argument(s) {', '.join(names)} re-laid out: "
        + "; ".join(_strides(x, made.get(x.name)) for x in moved)
        + f". {_which(case, alone, name)} The kernel assumes a layout it was not given (e.g. a "
        "row stride computed from the shape instead of x.stride(0), or a pointer from "
        "x.data_ptr() without the storage offset). Next: take every stride from the tensor "
        "(pass x.stride(i) to the kernel); if it truly needs this argument packed, declare "
        "Arg(..., layout='contiguous') in the spec (say why) and make it contiguous at the call "
        f"site. Reproduce: check_numerics(kernel={plan.kernel!r}, shapes={shapes}, "
        f"dtypes=[{case.dtype!r}], layouts=[{case.layout!r}])"
    )


def _which(case: Case, alone: list[int] | None, name) -> str:
    """Which argument's layout the failure comes from, as far as the probes tell."""
    if len(case.layout_args) == 1:
        return f"The layout of {name(case.layout_args[0])} makes it fail."
    if alone is None:
        return (
            "The layout of one or more of these makes it fail (not tried one at a time; to find "
            "which, declare layout='contiguous' on all but one with args=)."
        )
    innocent = [name(j) for j in case.layout_args if j not in alone]
    if not alone:
        return "Re-laid one at a time, each passes: it fails only with them re-laid together."
    passes = f"; with {', '.join(innocent)} alone re-laid it passes" if innocent else ""
    return (
        f"Re-laid one at a time: it fails with {' or '.join(name(j) for j in alone)} alone "
        f"re-laid{passes}."
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
