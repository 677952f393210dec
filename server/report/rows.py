"""One ledger row as the report sees it: an Experiment with its conditions, findings, key
number and claims, read from the row alone (no files). model.py links the rows together."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...kernels.code_identity import EXPERIMENT_ID
from ...kernels.snapshots import Manifest
from ...tools.list_experiments import iso
from ...tools.sweep_kernel.race import is_refusal
from .numbers import (
    Claim,
    KeyNumber,
    Relation,
    ab_relation,
    criteria_answer,
    improvements_and_regressions,
    key_number,
)

FAILED_STATUSES = ("error", "interrupted")
SWEEP_TOOLS = ("sweep_kernel", "sweep_serve")  # their calls make trials (parent_id)


@dataclass(frozen=True)
class Comparison:
    text: str  # as judged, e.g. 'ratio > 1.2'
    scope: str  # shape or case; '' for a whole-call field
    left: object
    right: object
    left_interval: list[float] | None
    right_interval: list[float] | None
    answer: str
    reason: str


@dataclass(frozen=True)
class Condition:
    condition: str
    answer: str  # supported, contradicted, inconclusive
    comparisons: list[Comparison]


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    message: str


@dataclass
class Experiment:
    seq: int
    id: str
    tool: str
    kernel: str | None
    engine: str | None
    hypothesis: str | None
    status: str  # ok, error, interrupted, running
    started_at: float  # Unix s
    duration_s: float | None
    summary: str  # the call's one-line answer, or its error
    answer: str  # hypothesis_answer: supported ... not_judged; running; error (the call failed)
    conditions: list[Condition]
    criteria: list[Condition]  # serve_benchmark's acceptance criteria
    criteria_answer: str | None
    verdict: str | None
    findings: list[Finding]
    key: KeyNumber | None
    claims: list[Claim]  # proven improvements, regressions and compared differences
    relation: Relation | None  # a microbench A/B: a change of the code, or a comparison
    baseline_id: str | None  # an experiment id named as baseline=
    baseline_label: str | None  # baseline= as given (an impl name, or that id)
    code: Manifest | None
    result: dict  # the tool's output as the ledger holds it ({} when the call failed)
    artifact_names: list[str]
    arguments: dict
    device: dict  # the server's host's facts (where the call was judged)
    device_fingerprint: str | None  # the server's host's
    # the cluster nodes its work ran on: node_id, address, hostname, device_fingerprint, jobs
    nodes: list[dict]
    git_commit: str | None
    run_id: str | None
    parent_id: str | None = None  # the sweep that made this call (a trial), else None
    used_by: list[str] = field(default_factory=list)  # experiments naming this one as baseline
    trials: list[str] = field(default_factory=list)  # a sweep's trials in this report, oldest first
    code_state: str = "unknown"  # same, changed, no snapshot, ... (vs what code_against names)
    code_against: str | None = None  # the experiment the code is compared with
    code_against_why: str = ""  # 'baseline' or 'previous <kernel> experiment'

    @property
    def started_iso(self) -> str:
        return iso(self.started_at)

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

    @property
    def is_sweep(self) -> bool:
        return self.tool in SWEEP_TOOLS

    @property
    def budget_refusal(self) -> bool:
        """A sweep's timing call microbench refused as too short for its timed calls: a budget
        probe, whose estimate the sweep's retry uses (no failure of the sweep's)."""
        return (
            self.parent_id is not None
            and self.status == "error"
            and is_refusal({"tool": self.tool, "error": self.summary})
        )


def experiment_from_row(row: dict) -> Experiment:
    result = _mapping(row.get("result"))
    args = _mapping(row.get("arguments"))
    hyp = _mapping(result.get("hypothesis_answer"))
    criteria = _mapping(result.get("criteria"))
    baseline = args.get("baseline")
    status = row["status"]
    code = Manifest.from_json(row.get("code"))
    relation = ab_relation(args, code.ran if code else {}) if row["tool"] == "microbench" else None
    return Experiment(
        seq=row["seq"],
        id=row["id"],
        tool=row["tool"],
        kernel=row.get("kernel"),
        engine=args.get("engine") if isinstance(args.get("engine"), str) else None,
        hypothesis=row.get("hypothesis"),
        status=status,
        started_at=row["started_at"],
        duration_s=row.get("duration_s"),
        summary=(result.get("summary") or "") if status == "ok" else (row.get("error") or status),
        answer=_answer(status, hyp),
        conditions=_conditions(hyp),
        criteria=_conditions(criteria),
        criteria_answer=criteria_answer(row["tool"], result),
        verdict=result.get("verdict") if isinstance(result.get("verdict"), str) else None,
        findings=_findings(result.get("findings")),
        key=key_number(row["tool"], result) if status == "ok" else None,
        claims=improvements_and_regressions(
            row["id"], row["tool"], row.get("kernel"), result, relation
        ),
        relation=relation,
        baseline_id=baseline
        if isinstance(baseline, str) and EXPERIMENT_ID.match(baseline)
        else None,
        baseline_label=baseline if isinstance(baseline, str) and len(baseline) < 80 else None,
        code=code,
        result=result,
        artifact_names=[uri.rsplit("/", 1)[-1] for uri in row.get("artifacts") or []],
        arguments=args,
        device=row.get("device") or {},
        device_fingerprint=row.get("device_fingerprint"),
        nodes=[n for n in row.get("nodes") or [] if isinstance(n, dict)],
        git_commit=row.get("git_commit"),
        run_id=row.get("run_id"),
        parent_id=row.get("parent_id"),
    )


def _answer(status: str, hypothesis_answer: dict) -> str:
    """The hypothesis' answer; 'running' for a call still open, 'error' for one that failed."""
    if status == "ok":
        return hypothesis_answer.get("answer", "not_judged")
    return "running" if status == "running" else "error"


def _mapping(value: object) -> dict:
    """A JSON object from the row, or {} (a row written by an older or failed call)."""
    return value if isinstance(value, dict) else {}


def _conditions(answer: dict) -> list[Condition]:
    conditions = []
    for c in answer.get("conditions") or []:
        comparisons = [
            Comparison(
                text=str(m.get("comparison", "")),
                scope=str(m.get("scope", "")),
                left=m.get("left"),
                right=m.get("right"),
                left_interval=m.get("left_interval"),
                right_interval=m.get("right_interval"),
                answer=str(m.get("answer", "")),
                reason=str(m.get("reason", "")),
            )
            for m in c.get("comparisons") or []
        ]
        conditions.append(Condition(str(c.get("condition")), str(c.get("answer")), comparisons))
    return conditions


def _findings(raw: object) -> list[Finding]:
    """check_numerics and profile give {code, severity, message}; serve_benchmark gives words."""
    findings = []
    for f in raw if isinstance(raw, list) else []:
        if isinstance(f, dict):
            findings.append(
                Finding(
                    str(f.get("code", "")), str(f.get("severity", "")), str(f.get("message", ""))
                )
            )
        else:
            findings.append(Finding("", "", str(f)))
    return findings
