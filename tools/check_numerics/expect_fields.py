"""What check_numerics' `expect` conditions may name: the verdict and findings of the call, and each
case's error numbers (a per-case condition must hold in every case).

An error number the evidence does not define is null, so a condition on it is inconclusive: the
relative L2 error of an all-zero reference, any error of an output with NaN/Inf where the reference
is finite (an unwritten element: the error is unbounded, not that of the finite elements), or any
error of a case whose candidate left no usable output (its verdict still fails).
"""

from __future__ import annotations

from ..common.expect import Catalogue, ExpectFields, Facts
from .schema import CaseReport, ErrorStats, Input, Output, PartitionReport

ERROR_FIELDS = (
    "rel_l2_error",
    "max_abs_error",
    "max_rel_error",
    "ulp_p50",
    "ulp_p99",
    "ulp_max",
    "num_mismatches",
    "nonfinite_mismatches",
    "candidate_nan_count",
    "candidate_inf_count",
)
PARTITION_FIELDS = (
    "partitioned_vs_reference_rel_l2",
    "unpartitioned_vs_reference_rel_l2",
    "partitioned_vs_unpartitioned_rel_l2",
    "partitioned_vs_unpartitioned_max_abs",
)

CATALOGUE = Catalogue(
    fields={
        "verdict": Output.model_fields["verdict"].description,
        "finding_codes": "Codes of every finding, e.g. 'partition_mismatch', 'unwritten_output', 'input_mutation'.",
        "error_finding_codes": "Codes of the findings with severity 'error' (those fail the verdict).",
        "num_cases": "Cases run.",
        "num_failed_cases": "Cases whose verdict is not 'pass'.",
        "num_raised_cases": "Cases whose candidate raised on its first call (their `error` names the kernel's "
        "file:line:col).",
        "is_locked": "True when a person locked this kernel's reference and tolerances.",
        "device": Output.model_fields["device"].description,
        "triton_compiles": Output.model_fields["triton_compiles"].description,
    },
    scoped={
        "case_verdict": CaseReport.model_fields["verdict"].description,
        "tolerance_rel_l2": CaseReport.model_fields["tolerance_rel_l2"].description,
        "error_to_tolerance": "rel_l2_error / tolerance_rel_l2 (1 = at the tolerance), unitless.",
        **{
            name: ErrorStats.model_fields[name].description + " (worst trial)"
            for name in ERROR_FIELDS
        },
        **{
            name: PartitionReport.model_fields[name].description + " (null when no partition ran)"
            for name in PARTITION_FIELDS
        },
        "triton_launches": CaseReport.model_fields["triton_launches"].description,
    },
    scope_kind="case",
)


def facts(inp: Input, out: Output, evidence: None) -> Facts:
    fields = {
        "verdict": out.verdict,
        "finding_codes": sorted({f.code for f in out.findings}),
        "error_finding_codes": sorted({f.code for f in out.findings if f.severity == "error"}),
        "num_cases": len(out.cases),
        "num_failed_cases": sum(c.verdict != "pass" for c in out.cases),
        "num_raised_cases": sum(c.error is not None for c in out.cases),
        "is_locked": bool(out.lock and out.lock.locked),
        "device": out.device,
        "triton_compiles": out.triton_compiles,
    }
    return Facts(fields=fields, scopes={c.case: _case_fields(c) for c in out.cases})


def _case_fields(case: CaseReport) -> dict:
    errors = case.errors.model_dump() if case.errors else {}
    partition = case.partition.model_dump() if case.partition else {}
    rel_l2 = errors.get("rel_l2_error")
    return {
        "case_verdict": case.verdict,
        "tolerance_rel_l2": case.tolerance_rel_l2,
        "error_to_tolerance": None if rel_l2 is None else rel_l2 / case.tolerance_rel_l2,
        **{name: errors.get(name) for name in ERROR_FIELDS},
        **{name: partition.get(name) for name in PARTITION_FIELDS},
        "triton_launches": case.triton_launches,
    }


EXPECT = ExpectFields(CATALOGUE, facts)
