"""check_numerics' verdict rules, in one place: a case's verdict from its findings, the
call's verdict from its cases, and the findings a changed human lock adds."""

from __future__ import annotations

from .schema import CaseReport, Finding


def case_verdict(all_trials_pass: bool, error_codes: set[str]) -> str:
    """'inconclusive' when the test itself is degenerate, else 'pass' only when every trial
    passed and no error finding showed."""
    if "degenerate_reference" in error_codes:
        return "inconclusive"
    if all_trials_pass and not error_codes:
        return "pass"
    return "fail"


def overall(reports: list[CaseReport], findings: list[Finding]) -> str:
    if any(f.severity == "error" and f.case is None for f in findings):
        return "fail"
    if any(r.verdict == "fail" for r in reports):
        return "fail"
    if any(r.verdict == "inconclusive" for r in reports):
        return "inconclusive"
    return "pass"


def lock_findings(notes: list[str]) -> list[Finding]:
    return [
        Finding(
            code=_lock_code(n),
            severity="error",
            message=f"LOCKED ACCEPTANCE VIOLATED: {n}; a locked "
            "kernel's verdict cannot pass until a person re-locks it",
        )
        for n in notes
    ]


def _lock_code(note: str) -> str:
    return (
        "reference_modified_since_lock" if "reference" in note else "acceptance_modified_since_lock"
    )
