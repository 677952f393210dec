"""check_numerics, step 3: judge one case from the files its jobs wrote, outside the
candidate's process. Runs in a worker thread (torch work on possibly large tensors), so
this module, the evidence and the findings import torch at the top and are imported only
there, never on the server's import path.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ...sandbox.worker.protocol import CALL_FIRST
from .answers import Call, CandidateRun, RefFacts
from .evidence import CaseEvidence, case_errors, load_evidence, op_totals, partition_result
from .findings import call_findings, case_findings
from .plan import Case, Plan
from .report import json_safe
from .schema import CaseReport, ErrorStats, Finding, InputLayout, PartitionReport
from .verdict import case_verdict


class CaseJudgement(NamedTuple):
    report: CaseReport
    partition_row: dict | None  # the worst partitioned-vs-unpartitioned trial (worst_cases.json)
    findings: list[Finding]
    errors: np.ndarray | None  # relative errors of the worst output's elements: the histogram


def judge_case(
    plan: Plan,
    case: Case,
    run: CandidateRun,
    ref_dir: Path,
    ref_facts: dict[str, RefFacts],
    enabled: set[str],
    device: str,
) -> CaseJudgement:
    """Judge one case from its candidate's run and the files both jobs wrote."""
    ev = CaseEvidence(
        label=case.label,
        dtype=case.dtype,
        out_dtype=case.storage_dtype,
        tol=case.tol,
        arg_names=[a["name"] for a in plan.args],
        keys=case.keys,
        seeds=case.seeds,
        device=device,
        ref_facts={k: ref_facts.get(k, RefFacts()) for k in case.keys},
        declared_triton=plan.triton_by_name,
    )
    load_evidence(ev, ref_dir, run)
    layouts = input_layouts(ev.inputs[case.keys[0]], ev.arg_names)
    first = next((c for c in ev.calls if c.kind == CALL_FIRST), None)
    if first is None or first.error is not None:
        report = _raised_report(case, first)
        report.layout, report.input_layouts = case.layout, layouts
        raised = Finding(
            code="candidate_raised", severity="error", case=case.label, message=report.error
        )
        return CaseJudgement(report, None, [raised], None)
    found = case_findings(ev, plan.forbidden_ops, enabled) + call_findings(ev)
    report, row = _case_report(plan, case, ev, found)
    report.layout, report.input_layouts = case.layout, layouts
    if report.verdict == "fail" and device == "cpu" and "precision" in enabled:
        found += _interpreter_suspect(ev)
    errors = None
    if report.errors:
        key = case.keys[report.errors.trial]
        out = (ev.outputs.get((key, CALL_FIRST)) or [None])[report.errors.output_index]
        if out is not None:
            errors = element_errors(out, ev.refs[key][report.errors.output_index])
    return CaseJudgement(report, row, found, errors)


def _raised_report(case: Case, first: Call | None) -> CaseReport:
    """The case whose first call raised (e.g. a kernel that does not compile for this dtype):
    the error, pointed at the candidate's line, is the case's result; other cases keep theirs.
    First line: file:line:col and the message (else the exception); then the source excerpt
    or the traceback."""
    exc = (first.error if first is not None else None) or "no call was recorded"
    diag = first.diagnostic if first is not None else None
    head, _, excerpt = diag.partition("\n") if diag else (exc, "", "")
    error = (
        f"{head}\nraised by the candidate on case {case.label}, trial 0 (seed {case.seeds[0]}): {exc}\n"
        f"{excerpt or (first.traceback if first is not None else '')}"
    )
    return CaseReport(
        case=case.label,
        shape=case.shape,
        dtype=case.dtype,
        verdict="fail",
        tolerance_rel_l2=case.tol.rel_l2,
        tolerance_max_abs=case.tol.max_abs,
        tolerance_source=case.tol.source,
        tolerance_why=case.tol.why,
        seeds=case.seeds,
        trial_rel_l2=[None] * len(case.keys),
        errors=None,
        error=error.strip()[:6000],
    )


def _interpreter_suspect(ev: CaseEvidence) -> list[Finding]:
    """A failing case whose kernel did bfloat16 arithmetic in the CPU interpreter, which keeps
    bf16 as raw uint16 bits and does integer arithmetic on them (docs/kernel-loop.md, check_numerics)."""
    ops = sum(c.interpreter_bf16_ops for c in ev.calls if c.kind == CALL_FIRST)
    if not ops:
        return []
    return [
        Finding(
            code="interpreter_bf16_suspect",
            severity="warning",
            case=ev.label,
            message=(
                f"the kernel ran {ops} bfloat16 arithmetic operations in the Triton interpreter (CPU), which computes "
                "bfloat16 arithmetic wrongly (it multiplies and adds the raw bit patterns): the interpreter, not the "
                "kernel, may be at fault. Confirm: upcast to float32 in the kernel (x.to(tl.float32) after each load, "
                ".to(out_ptr.dtype.element_ty) at the store) and check again, or run on a GPU"
            ),
        )
    ]


def _case_report(
    plan: Plan, case: Case, ev: CaseEvidence, found: list[Finding]
) -> tuple[CaseReport, dict | None]:
    worst, per_trial, ok = case_errors(ev)
    ops, launches = op_totals(ev)
    worst, per_trial = json_safe(worst), [json_safe(v) for v in per_trial]
    part = None
    partition = plan.partition  # layout cases too: each rank's shard is cut contiguous
    row = partition_result(ev, partition) if partition else None
    if partition:
        meta = {
            "args": partition["names"],
            "num_parts": partition["num_parts"],
            "combine": partition["combine"],
            "sum_order": partition["sum_order"],
        }
        if row is None:
            found.append(
                Finding(
                    code="partition_mismatch",
                    severity="error",
                    case=case.label,
                    message="the ranks' outputs could not be combined into the full output's shape",
                )
            )
            part = PartitionReport(
                **meta,
                partitioned_vs_reference_rel_l2=None,
                unpartitioned_vs_reference_rel_l2=None,
                partitioned_vs_unpartitioned_rel_l2=None,
                partitioned_vs_unpartitioned_max_abs=None,
                is_within_tolerance=False,
            )
        else:
            numbers = {k: json_safe(v) for k, v in row.items() if k in PartitionReport.model_fields}
            part = PartitionReport(**meta, **numbers)
            if row["diverges"]:
                found.append(
                    Finding(
                        code="partition_mismatch",
                        severity="error",
                        case=case.label,
                        message=(
                            f"{meta['num_parts']} ranks split {meta['args']} ({meta['combine']}): "
                            "partitioned vs unpartitioned "
                            f"rel L2 {row['partitioned_vs_unpartitioned_rel_l2']:.3g}, partitioned vs reference "
                            f"{row['partitioned_vs_reference_rel_l2']:.3g}, unpartitioned vs reference "
                            f"{row['unpartitioned_vs_reference_rel_l2']:.3g} (tolerance {case.tol.rel_l2:.3g}); "
                            "most divergent "
                            f"element {row['most_divergent_index']} of trial {row['trial']}"
                        ),
                    )
                )
    verdict = case_verdict(ok, {f.code for f in found if f.severity == "error"})
    report = CaseReport(
        case=case.label,
        shape=case.shape,
        dtype=case.dtype,
        verdict=verdict,
        tolerance_rel_l2=case.tol.rel_l2,
        tolerance_max_abs=case.tol.max_abs,
        tolerance_source=case.tol.source,
        tolerance_why=case.tol.why,
        seeds=case.seeds,
        trial_rel_l2=per_trial,
        errors=ErrorStats(**worst) if worst else None,
        partition=part,
        aten_ops=ops,
        triton_launches=launches,
    )
    return report, row


def input_layouts(inputs: list[torch.Tensor], names: list[str]) -> list[InputLayout]:
    """Each input's layout as the saved file holds it (the candidate's worker loads that
    file with these strides): the parent's own reading, not the worker's word."""
    named = [names[j] if j < len(names) else str(j) for j in range(len(inputs))]
    storages = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in inputs]
    return [
        InputLayout(
            name=named[j],
            shape=list(t.shape),
            stride=list(t.stride()),
            storage_offset=int(t.storage_offset()),
            shares_storage_with=[
                named[i] for i in range(len(inputs)) if i != j and storages[i] == storages[j]
            ],
        )
        for j, t in enumerate(inputs)
    ]


MAX_HISTOGRAM_ELEMENTS = 1 << 20


def element_errors(candidate, reference):
    """The histogram's values for one output (NaN where the candidate is not finite), a
    strided sample of at most 2^20 elements: the shape of the distribution, bounded memory."""
    c, r = candidate.double().reshape(-1), reference.double().reshape(-1)
    step = max(1, -(-c.numel() // MAX_HISTOGRAM_ELEMENTS))
    c, r = c[::step], r[::step]
    finite = torch.isfinite(r)
    rms = float(r[finite].pow(2).mean().sqrt()) if bool(finite.any()) else 0.0
    err = (c - r).abs() / (r.abs() + rms + 1e-300)
    return err.cpu().numpy()
