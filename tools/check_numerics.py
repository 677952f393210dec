"""check_numerics: does the candidate compute the same function as the reference, honestly?

Plan (tools/numerics_plan.py) -> a `reference` job writes seeded inputs and float64
reference outputs -> one `numerics_run` job per case runs the candidate on those inputs
(NaN-prefilled outputs, reused buffers, a repeat, simulated TP ranks, op audit) -> the
comparison, the findings and the verdict are computed here, outside the candidate's
process (numerics_case, numerics_findings) -> artifacts (numerics_report).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from ..sandbox.job import Job
from .base import AgentError, Tool, ToolContext, ToolInput, ToolOutput
from .numerics_case import CaseEvidence, case_errors, load_evidence, op_totals, partition_result
from .numerics_findings import CHECKS, Finding, call_findings, case_findings
from .numerics_plan import Case, Plan, make_plan
from .numerics_report import element_errors, histogram_png, json_safe, summary, worst_json
from .seeds import trial_seed

CheckName = Literal["unwritten", "mutation", "aliasing", "tensor_type", "determinism", "caching",
                    "op_audit", "tampering", "precision", "degenerate"]


class ArgInput(BaseModel):
    name: str = Field(description="Positional argument name.")
    shape: list[str | int] = Field(description="Dimension names (sized by each shape) or fixed ints, e.g. ['M', 'N'].")
    dtype: str | None = Field(default=None, description="Pinned dtype (e.g. 'int32'); null takes the case dtype.")
    distribution: Literal["normal", "uniform", "positive", "int"] = Field(default="normal", description="How values are drawn.")
    low: int = Field(default=0, description="Integer arguments: smallest value drawn.")
    high: int = Field(default=2**16, description="Integer arguments: one past the largest value drawn.")


class PartitionInput(BaseModel):
    args: dict[str, int] = Field(description="Argument name -> dimension split across ranks; others are replicated.")
    num_parts: int = Field(default=2, ge=2, le=64, description="Number of simulated tensor-parallel ranks.")
    combine: Literal["concat", "sum"] = Field(default="concat", description="'concat' rank outputs along out_dim, or "
                                              "'sum' them in rank order in the output dtype (an all-reduce).")
    out_dim: int = Field(default=0, description="Output dimension for 'concat'.")
    sum_order: list[int] | None = Field(default=None, description="For 'sum': the order ranks are added in, a "
                                        "permutation of 0..num_parts-1 (default rank order); float addition is not "
                                        "associative, so the order is part of the all-reduce's numerics.")


class Input(ToolInput):
    kernel: str | None = Field(default=None, description="Kernel name from list_kernels; supplies reference, shapes, "
                               "dtypes, tolerances, partition and forbidden ops.")
    impl: str | None = Field(default=None, description="Implementation of the kernel to check (default 'triton').")
    source: str | None = Field(default=None, description="Candidate as inline Python source (with entry=).")
    path: str | None = Field(default=None, description="Candidate as a workspace file (with entry=).")
    entry: str | None = Field(default=None, description="Function to call in source/path.")
    reference: str | None = Field(default=None, description="Override the reference: 'file.py:fn' (kernel folder or "
                                  "workspace root) or Python source. On a locked kernel the verdict cannot pass.")
    reference_entry: str | None = Field(default=None, description="Function name when reference= is source.")
    args: list[ArgInput] | None = Field(default=None, description="Argument declarations for ad-hoc code without kernel=.")
    shapes: list[dict[str, int]] | None = Field(default=None, description="Named sizes per case, e.g. [{'M': 4, 'N': 64}]; "
                                                "default: the spec's CPU or GPU set.")
    dtypes: list[str] | None = Field(default=None, description="float32, float16, bfloat16, float64, or tf32 (float32 "
                                     "tensors judged at TF32 tolerance); default: the spec's.")
    trials: int = Field(default=3, ge=1, le=20, description="Fresh random inputs per case (each its own seed).")
    tolerance: float | None = Field(default=None, gt=0, description="Relative L2 tolerance for every case, overriding "
                                    "spec and dtype defaults (reported as source 'argument').")
    distribution: Literal["normal", "uniform", "large", "tiny", "constant_row"] | None = Field(
        default=None, description="Value distribution of float inputs: N(0,1), U[-1,1), x1e4, x1e-4, first row constant.")
    partition: bool | PartitionInput | None = Field(default=None, description="Simulated tensor-parallel ranks: true for "
                                                    "the spec's partition, false for none, or an explicit one; default: the spec's if any.")
    checks: list[CheckName] | None = Field(default=None, description="Integrity checks to run (default all): "
                                           + ", ".join(CHECKS) + ".")
    timeout_s: float = Field(default=300, gt=0, le=3600, description="Wall-clock limit per case job, in seconds.")


class ErrorStats(BaseModel):
    max_abs_error: float = Field(description="Largest |cand - ref| over finite elements.")
    max_rel_error: float = Field(description="Largest |cand - ref| / |ref| over finite nonzero-reference elements.")
    rel_l2_error: float | None = Field(description="||cand - ref|| / ||ref|| over elements finite in both (the "
                                       "verdict's metric; NaN/Inf mismatches are counted apart and always fail), "
                                       "unitless; null when undefined (an all-zero reference).")
    ulp_p50: float = Field(description="Median error in ULPs of the output dtype at the reference value.")
    ulp_p99: float = Field(description="99th-percentile error in ULPs of the output dtype.")
    ulp_max: float = Field(description="Largest error in ULPs of the output dtype.")
    num_mismatches: int = Field(description="Elements whose error exceeds tolerance x (|ref| + rms(ref)), or NaN/Inf where ref is finite.")
    first_mismatch_indices: list[list[int]] = Field(description="Up to 5 mismatching element indices, in order.")
    nonfinite_mismatches: int = Field(description="Elements NaN/Inf in the candidate but not in the reference (or vice versa).")
    candidate_nan_count: int = Field(description="NaN elements in the candidate's output.")
    candidate_inf_count: int = Field(description="Inf elements in the candidate's output.")
    reference_nonfinite_count: int = Field(description="NaN/Inf elements in the reference.")
    worst_index: list[int] = Field(description="Index of the worst element (first non-finite mismatch, else largest scaled error).")
    worst_candidate: float | None = Field(description="Candidate value there (null if NaN/Inf).")
    worst_reference: float | None = Field(description="Reference value there (float64).")
    trial: int = Field(description="Trial (0-based) these numbers come from: the worst one.")
    output_index: int = Field(description="Which output of the entry function.")


class PartitionReport(BaseModel):
    args: dict[str, int] = Field(description="Argument -> split dimension.")
    num_parts: int = Field(description="Simulated ranks.")
    combine: str = Field(description="'concat' or 'sum'.")
    sum_order: list[int] = Field(description="Order the ranks' outputs were added in ('sum').")
    partitioned_vs_reference_rel_l2: float | None = Field(description="Ranks combined vs float64 reference (rel L2).")
    unpartitioned_vs_reference_rel_l2: float | None = Field(description="One call on the whole input vs reference (rel L2).")
    partitioned_vs_unpartitioned_rel_l2: float | None = Field(description="Ranks combined vs one whole call (rel L2).")
    partitioned_vs_unpartitioned_max_abs: float | None = Field(description="Largest |partitioned - unpartitioned|.")
    most_divergent_index: list[int] = Field(default_factory=list, description="Element where partitioned and unpartitioned differ most.")
    most_divergent_partitioned: float | None = Field(default=None, description="Partitioned value there.")
    most_divergent_unpartitioned: float | None = Field(default=None, description="Unpartitioned value there.")
    most_divergent_reference: float | None = Field(default=None, description="Reference value there.")
    is_within_tolerance: bool = Field(description="Partitioned within tolerance of both the reference and the unpartitioned call.")


class CaseReport(BaseModel):
    case: str = Field(description="Shape and dtype, e.g. 'M=4 N=64 float32'.")
    shape: dict[str, int] = Field(description="Named sizes.")
    dtype: str = Field(description="Case dtype.")
    verdict: Literal["pass", "fail", "inconclusive"] = Field(description="This case's verdict (numerics and error findings).")
    tolerance_rel_l2: float = Field(description="Relative L2 tolerance applied.")
    tolerance_max_abs: float | None = Field(description="Absolute tolerance applied, if any.")
    tolerance_source: str = Field(description="'argument', 'spec' or 'dtype default'.")
    tolerance_why: str = Field(description="Why the tolerance is that size.")
    seeds: list[int] = Field(description="Seed of each trial's inputs (reproduce with these; the next ones are unpredictable).")
    trial_rel_l2: list[float | None] = Field(description="Each trial's rel L2 error (null: unusable output).")
    errors: ErrorStats | None = Field(description="The worst trial's error numbers (null: no usable output).")
    partition: PartitionReport | None = Field(default=None, description="Partition equivalence, when run.")
    aten_ops: dict[str, int] = Field(default_factory=dict, description="Op audit: aten ops the candidate dispatched "
                                     "in its first call of each trial, with counts (a Triton kernel under the "
                                     "interpreter shows only allocation/copy ops).")
    triton_launches: int = Field(default=0, description="Triton kernel launches in those calls.")


class LockReport(BaseModel):
    locked: bool = Field(description="A human locked this kernel's acceptance criteria (infra-agent lock).")
    locked_at: str | None = Field(default=None, description="When (UTC).")
    problems: list[str] = Field(default_factory=list, description="What differs from the lock; any makes the verdict fail.")


class Output(ToolOutput):
    verdict: Literal["pass", "fail", "inconclusive"] = Field(description="'pass' only if every case passes and no "
                                                             "error finding; 'inconclusive' when the test is degenerate.")
    candidate: str = Field(description="What was checked.")
    device: str = Field(description="'cuda' or 'cpu' (Triton interpreted).")
    cases: list[CaseReport] = Field(description="One per (shape, dtype).")
    findings: list[Finding] = Field(description="Integrity findings, each naming the trick and where it showed.")
    lock: LockReport | None = Field(description="Pinned acceptance status (null: no kernel).")
    checks: list[str] = Field(description="Integrity checks that ran.")


async def run(inp: Input, ctx: ToolContext) -> Output:
    sandbox = ctx.sandbox
    device = str(getattr(sandbox, "device", "cpu"))
    plan = make_plan(inp, ctx.workspace, sandbox, device,
                     lambda c, t: trial_seed(ctx.workspace.state_dir, ctx.experiment_id, c, t))
    enabled = set(inp.checks if inp.checks is not None else CHECKS)
    env = {} if device == "cuda" else {"TRITON_INTERPRET": "1"}
    total = len(plan.cases) + 1
    await ctx.progress(0, total, "reference")
    ref = await sandbox.run(Job(op="reference", payload=_reference_payload(plan), timeout_s=inp.timeout_s, env=env))
    if not ref.ok:
        raise AgentError(f"the reference could not run ({ref.status}): {ref.error}. Fix the reference or the shapes.")
    ref_items = ref.result.get("items", {}) if isinstance(ref.result, dict) else {}
    findings = [Finding(code=_lock_code(n), severity="error", message=f"LOCKED ACCEPTANCE VIOLATED: {n}; a locked "
                        "kernel's verdict cannot pass until a person re-locks it") for n in plan.notes]
    reports, series, partition_rows = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="check-numerics-") as keep:
        ref_dir = _keep_reference_files(ref.out_dir, plan, Path(keep))  # job folders are pruned as jobs start
        for case in plan.cases:
            await ctx.progress(case.index + 1, total, f"case {case.label}")
            res = await _run_case(plan, case, sandbox, env, ref_dir, enabled, inp.timeout_s)
            # torch work on possibly large tensors: off the event loop, so the server keeps serving
            report, row, case_found, errors = await anyio.to_thread.run_sync(
                _evaluate, plan, case, res, ref_dir, ref_items, enabled, device)
            findings += case_found
            reports.append(report)
            partition_rows[case.label] = row
            if errors is not None:
                series[case.label] = errors
    verdict = _overall(reports, findings)
    artifacts = [ctx.artifact("worst_cases.json", worst_json(reports, partition_rows))]
    if series:
        artifacts.append(ctx.artifact("error_histogram.png", histogram_png(series)))
    await ctx.progress(total, total, f"verdict {verdict}")
    lock = None if plan.lock is None else LockReport(locked=plan.lock.locked, locked_at=plan.lock.locked_at, problems=plan.notes)
    return Output(verdict=verdict, candidate=plan.candidate_name, device=device, cases=reports, findings=findings,
                  lock=lock, checks=sorted(enabled), artifacts=artifacts,
                  summary=summary(plan.candidate_name, verdict, reports, findings, inp.hypothesis))


def _keep_reference_files(out_dir: Path | None, plan: Plan, keep: Path) -> Path:
    for case in plan.cases:
        for key in case.keys:
            for name in (f"{key}.inputs.pt", f"{key}.ref.pt"):
                src = Path(out_dir or "/nonexistent") / name
                if not src.is_file() or src.is_symlink():
                    raise AgentError(f"the reference job wrote no {name}; the reference must return tensors")
                shutil.copyfile(src, keep / name)
    return keep


def _reference_payload(plan: Plan) -> dict:
    items = [{"key": key, "shape": c.shape, "dtype": c.storage_dtype, "seed": seed, "distribution": plan.distribution}
             for c in plan.cases for key, seed in zip(c.keys, c.seeds)]
    return {"reference": plan.reference, "args": plan.args, "make_inputs": plan.make_inputs, "items": items,
            "float64": True}


async def _run_case(plan, case: Case, sandbox, env, ref_dir, enabled, timeout_s):
    payload = {"candidate": plan.candidate, "keys": case.keys, "repeat": "determinism" in enabled,
               "partition": plan.partition}
    inputs = {f"{k}.inputs.pt": ref_dir / f"{k}.inputs.pt" for k in case.keys}
    res = await sandbox.run(Job(op="numerics_run", payload=payload, timeout_s=timeout_s, inputs=inputs, env=env))
    if res.status == "timeout":
        raise AgentError(f"the candidate timed out after {timeout_s:g} s on case {case.label}; use smaller shapes, "
                         "fewer trials, or raise timeout_s (the Triton interpreter is slow on CPU)")
    if not res.ok:
        raise AgentError(f"the candidate could not run on case {case.label} ({res.status}): {res.error}")
    return res


def _evaluate(plan, case: Case, res, ref_dir, ref_items, enabled, device):
    """Judge one case from its files: (report, partition row, findings, histogram values)."""
    ev = CaseEvidence(label=case.label, dtype=case.dtype, out_dtype=case.storage_dtype, tol=case.tol,
                      arg_names=[a["name"] for a in plan.args], keys=case.keys, seeds=case.seeds, device=device,
                      ref_facts={k: ref_items.get(k, {}) for k in case.keys})
    load_evidence(ev, ref_dir, res.out_dir, res.result if isinstance(res.result, dict) else {})
    first = next((c for c in ev.calls if c.get("kind") == "first"), None)
    if first is None or "error" in first:
        detail = (first or {}).get("traceback") or (first or {}).get("error") or "no call was recorded"
        raise AgentError(f"the candidate raised on case {case.label}, trial 0 (seed {case.seeds[0]}):\n{detail}")
    found = case_findings(ev, plan.forbidden_ops, enabled) + call_findings(ev)
    report, row = _judge(plan, case, ev, found)
    errors = None
    if report.errors:
        key = case.keys[report.errors.trial]
        out = (ev.outputs.get((key, "first")) or [None])[report.errors.output_index]
        if out is not None:
            errors = element_errors(out, ev.refs[key][report.errors.output_index])
    return report, row, found, errors


def _judge(plan: Plan, case: Case, ev: CaseEvidence, found: list[Finding]) -> tuple[CaseReport, dict | None]:
    worst, per_trial, ok = case_errors(ev)
    ops, launches = op_totals(ev)
    worst, per_trial = json_safe(worst), [json_safe(v) for v in per_trial]
    part = None
    row = partition_result(ev, plan.partition) if plan.partition else None
    if plan.partition:
        meta = {"args": plan.partition["names"], "num_parts": plan.partition["num_parts"],
                "combine": plan.partition["combine"], "sum_order": plan.partition["sum_order"]}
        if row is None:
            found.append(Finding(code="partition_mismatch", severity="error", case=case.label,
                                 message="the ranks' outputs could not be combined into the full output's shape"))
            part = PartitionReport(**meta, partitioned_vs_reference_rel_l2=None, unpartitioned_vs_reference_rel_l2=None,
                                   partitioned_vs_unpartitioned_rel_l2=None, partitioned_vs_unpartitioned_max_abs=None,
                                   is_within_tolerance=False)
        else:
            part = PartitionReport(**meta, **{k: json_safe(v) for k, v in row.items() if k in PartitionReport.model_fields})
            if not row["is_within_tolerance"]:
                found.append(Finding(code="partition_mismatch", severity="error", case=case.label, message=(
                    f"{meta['num_parts']} ranks split {meta['args']} ({meta['combine']}): partitioned vs unpartitioned "
                    f"rel L2 {row['partitioned_vs_unpartitioned_rel_l2']:.3g}, partitioned vs reference "
                    f"{row['partitioned_vs_reference_rel_l2']:.3g}, unpartitioned vs reference "
                    f"{row['unpartitioned_vs_reference_rel_l2']:.3g} (tolerance {case.tol.rel_l2:.3g}); most divergent "
                    f"element {row['most_divergent_index']} of trial {row['trial']}")))
    severities = {f.code for f in found if f.severity == "error"}
    verdict = ("inconclusive" if "degenerate_reference" in severities
               else "pass" if ok and not severities else "fail")
    report = CaseReport(case=case.label, shape=case.shape, dtype=case.dtype, verdict=verdict,
                        tolerance_rel_l2=case.tol.rel_l2, tolerance_max_abs=case.tol.max_abs,
                        tolerance_source=case.tol.source, tolerance_why=case.tol.why, seeds=case.seeds,
                        trial_rel_l2=per_trial, errors=ErrorStats(**worst) if worst else None, partition=part,
                        aten_ops=ops, triton_launches=launches)
    return report, row


def _overall(reports: list[CaseReport], findings: list[Finding]) -> str:
    if any(f.severity == "error" and f.case is None for f in findings) or any(r.verdict == "fail" for r in reports):
        return "fail"
    return "inconclusive" if any(r.verdict == "inconclusive" for r in reports) else "pass"


def _lock_code(note: str) -> str:
    return "reference_modified_since_lock" if "reference" in note else "acceptance_modified_since_lock"


TOOL = Tool(
    name="check_numerics",
    title="Check numerics and integrity",
    description="Does a kernel compute the same function as its reference, honestly? Runs the candidate on fresh "
    "seeded inputs per trial, compares with a float64 reference outside its process (max abs/rel, rel L2, ULP, "
    "mismatch indices, NaN/Inf) against a documented tolerance, and reports integrity findings: unwritten output, "
    "input mutation, aliasing, tensor subclasses, nondeterminism, result caching, forbidden/library ops, "
    "lower precision, and partitioned (simulated tensor-parallel) vs unpartitioned divergence. Tolerance (relative L2): "
    "the tolerance argument, else the kernel spec's, else the dtype table (float64 1e-12, float32 1e-5, tf32 5e-4, "
    "float16 1e-3, bfloat16 1e-2); a human-locked kernel cannot pass with a changed reference or a looser tolerance.",
    input_model=Input,
    output_model=Output,
    run=run,
    read_only=True,
    idempotent=False,
)
