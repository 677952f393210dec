"""check_numerics, last step: the summary line and the artifacts (histogram, worst cases)."""

from __future__ import annotations

import json

from .answers import MEMORY_OPS


def summary(what_ran: str, verdict: str, cases: list, findings: list) -> str:
    """`what_ran`: the candidate, shapes and dtypes (Plan.what_ran)."""
    failed = [c for c in cases if c.verdict != "pass"]
    errors = [f for f in findings if f.severity == "error"]
    worst = max((c for c in cases if c.errors), default=None, key=_badness)
    parts = [f"{verdict.upper()}: {what_ran}: {len(cases)} case(s), {len(failed)} failed"]
    raised = [c for c in cases if c.error]
    if raised:
        parts.append(
            f"{len(raised)} case(s) raised ({', '.join(c.case for c in raised)}): "
            f"{raised[0].error.splitlines()[0][:300]}"
        )
    if worst is not None:
        e = worst.errors
        rel = "undefined" if e.rel_l2_error is None else f"{e.rel_l2_error:.3g}"
        nonfinite = ""
        if e.nonfinite_mismatches:
            nonfinite = f"{e.nonfinite_mismatches} NaN/Inf where the reference is finite, "
        parts.append(
            f"worst case {worst.case}: {nonfinite}rel L2 {rel} vs tolerance {worst.tolerance_rel_l2:.3g} "
            f"({worst.tolerance_source}), worst element {e.worst_index}"
        )
    if (torch_only := _torch_only(cases, findings)) is not None:
        parts.append(torch_only)
    if errors:
        parts.append("findings: " + ", ".join(sorted({f.code for f in errors})))
    # a warning does not fail the verdict, but an agent reading only this line must see it
    # (the eval's nondeterminism task: a PASS whose two identical calls differed bitwise)
    warnings = sorted({f.code for f in findings if f.severity == "warning"})
    if warnings:
        parts.append("warnings: " + ", ".join(warnings))
    if any(f.code == "interpreter_bf16_suspect" for f in findings):
        parts.append(
            "suspect: the Triton interpreter computes bfloat16 arithmetic wrongly on CPU; upcast to "
            "float32 in the kernel or run on a GPU to confirm (finding interpreter_bf16_suspect)"
        )
    return "; ".join(parts)


def _torch_only(cases: list, findings: list) -> str | None:
    """What computed the result when no case launched a Triton kernel (a torch-only impl, which
    no finding names unless it declared itself Triton: then no_triton_launch says it)."""
    ran = [c for c in cases if c.error is None]
    if not ran or any(c.triton_launches for c in ran):
        return None
    if any(f.code == "no_triton_launch" for f in findings):
        return None
    ops = sorted({op for c in ran for op in c.aten_ops if op not in MEMORY_OPS})
    return "no Triton launch: computed by " + (", ".join(ops) if ops else "code outside torch ops")


def _badness(case) -> tuple:
    e = case.errors
    ratio = float("inf") if e.rel_l2_error is None else e.rel_l2_error / case.tolerance_rel_l2
    return (case.verdict == "fail", e.nonfinite_mismatches > 0, ratio)


def worst_json(cases: list, partition_rows: dict) -> str:
    data = [
        {
            "case": c.case,
            "verdict": c.verdict,
            "seeds": c.seeds,
            "worst": c.errors.model_dump() if c.errors else None,
            "partition": json_safe(partition_rows.get(c.case) or {}) or None,
        }
        for c in cases
    ]
    return json.dumps(data, indent=2)


def json_safe(value):
    """JSON has no Infinity/NaN: undefined numbers (e.g. rel L2 against an all-zero
    reference) travel as null; the NaN/Inf counts say what happened."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
