"""The report's view of the ledger: typed experiments, their chains of baselines, and the
summary a person reads first. Everything here is read from the ledger rows alone (cheap,
also for 10,000 rows); the code diff and the artifacts of one experiment are read when its
page is made (pages.py).

A chain is an experiment that names no baseline in this report plus every experiment that
names it as baseline, transitively: the story of one line of attack.
"""

from __future__ import annotations

import gc
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...kernels.snapshots import Manifest
from ...tools.list_experiments import iso
from ..ledger import read_only_rows
from .numbers import (
    Claim,
    KeyNumber,
    criteria_answer,
    improvements_and_regressions,
    key_number,
)

EXPERIMENT_ID = re.compile(r"^e\d{5,}-[0-9a-f]{4}$")
FAILED_STATUSES = ("error", "interrupted")


@dataclass(frozen=True)
class Filters:
    since: float | None = None  # Unix s, inclusive
    until: float | None = None  # Unix s, exclusive
    kernel: str | None = None

    def words(self) -> str:
        parts = [f"since {iso(self.since)}" if self.since is not None else ""]
        parts.append(f"until {iso(self.until)}" if self.until is not None else "")
        parts.append(f"kernel {self.kernel}" if self.kernel else "")
        return ", ".join(p for p in parts if p) or "the whole ledger"


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
    claims: list[Claim]  # proven improvements and regressions this call showed
    baseline_id: str | None  # an experiment id named as baseline=
    baseline_label: str | None  # baseline= as given (an impl name, or that id)
    code: Manifest | None
    result: dict  # the tool's output as the ledger holds it ({} when the call failed)
    artifact_names: list[str]
    arguments: dict
    device: dict
    device_fingerprint: str | None
    git_commit: str | None
    run_id: str | None
    used_by: list[str] = field(default_factory=list)  # experiments naming this one as baseline
    code_state: str = "unknown"  # same, changed, no snapshot, ... (vs what code_against names)
    code_against: str | None = None  # the experiment the code is compared with
    code_against_why: str = ""  # 'baseline' or 'previous <kernel> experiment'

    @property
    def started_iso(self) -> str:
        return iso(self.started_at)

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES


@dataclass(frozen=True)
class ChainRow:
    experiment: Experiment
    depth: int  # 0: the chain's root; 1: names the root as baseline; ...


@dataclass(frozen=True)
class Chain:
    root: Experiment
    rows: list[ChainRow]


@dataclass
class Summary:
    improvements: list[Claim]
    regressions: list[Claim]
    criteria_pass: list[Experiment]
    criteria_fail: list[Experiment]
    supported: list[Experiment]
    contradicted: list[Experiment]
    open: list[Experiment]  # inconclusive hypotheses or criteria
    errors: list[Experiment]


@dataclass
class Report:
    state_dir: Path
    filters: Filters
    generated_at: float
    ledger_exists: bool
    experiments: list[Experiment]  # oldest first
    by_id: dict[str, Experiment]
    chains: list[Chain]
    summary: Summary

    @property
    def generated_iso(self) -> str:
        return iso(self.generated_at)


def load_report(state_dir: Path, filters: Filters) -> Report:
    ledger = state_dir / "ledger.sqlite"
    # Reading 10,000 rows makes millions of small objects that all live on: the cyclic
    # collector would walk them again and again for nothing (half the load time).
    gc.disable()
    try:
        rows = read_only_rows(
            ledger, since=filters.since, until=filters.until, kernel=filters.kernel
        )
        experiments = [_experiment(row) for row in rows]
    finally:
        gc.enable()
    by_id = {e.id: e for e in experiments}
    _link_baselines(experiments, by_id)
    _compare_code(experiments, by_id)
    return Report(
        state_dir=state_dir,
        filters=filters,
        generated_at=time.time(),
        ledger_exists=ledger.is_file(),
        experiments=experiments,
        by_id=by_id,
        chains=_chains(experiments, by_id),
        summary=_summary(experiments),
    )


def _experiment(row: dict) -> Experiment:
    result = _mapping(row.get("result"))
    args = _mapping(row.get("arguments"))
    hyp = _mapping(result.get("hypothesis_answer"))
    criteria = _mapping(result.get("criteria"))
    baseline = args.get("baseline")
    status = row["status"]
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
        claims=improvements_and_regressions(row["id"], row["tool"], row.get("kernel"), result),
        baseline_id=baseline
        if isinstance(baseline, str) and EXPERIMENT_ID.match(baseline)
        else None,
        baseline_label=baseline if isinstance(baseline, str) and len(baseline) < 80 else None,
        code=Manifest.from_json(row.get("code")),
        result=result,
        artifact_names=[uri.rsplit("/", 1)[-1] for uri in row.get("artifacts") or []],
        arguments=args,
        device=row.get("device") or {},
        device_fingerprint=row.get("device_fingerprint"),
        git_commit=row.get("git_commit"),
        run_id=row.get("run_id"),
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


def _link_baselines(experiments: list[Experiment], by_id: dict[str, Experiment]) -> None:
    for exp in experiments:
        if exp.baseline_id in by_id:
            by_id[exp.baseline_id].used_by.append(exp.id)


def _compare_code(experiments: list[Experiment], by_id: dict[str, Experiment]) -> None:
    """Each experiment's code against its baseline's, or else against the previous experiment
    on the same kernel: an overnight agent often edits a file in place without naming a
    baseline, and 'did the code change since the last try' is the question then."""
    last_on_kernel: dict[str, Experiment] = {}
    for exp in experiments:
        against, why = None, ""
        if exp.baseline_id in by_id:
            against, why = by_id[exp.baseline_id], "baseline"
        elif exp.kernel and exp.kernel in last_on_kernel:
            against, why = last_on_kernel[exp.kernel], f"previous {exp.kernel} experiment"
        if exp.kernel and exp.code is not None:
            last_on_kernel[exp.kernel] = exp
        if against is None:
            exp.code_state = "no snapshot" if exp.code is None else "first"
            continue
        exp.code_against, exp.code_against_why = against.id, why
        if exp.code is None or against.code is None:
            exp.code_state = "no snapshot"
        elif _hashes(exp.code) == _hashes(against.code):
            exp.code_state = "same"
        else:
            exp.code_state = "changed"


def _hashes(manifest: Manifest) -> dict[str, str]:
    return {path: entry.sha256 for path, entry in manifest.entries().items()}


def _chains(experiments: list[Experiment], by_id: dict[str, Experiment]) -> list[Chain]:
    chains = []
    for exp in experiments:
        if exp.baseline_id in by_id:
            continue  # drawn under its baseline's chain
        rows: list[ChainRow] = []
        stack = [(exp, 0)]
        while stack:  # depth first, children in ledger order
            node, depth = stack.pop()
            rows.append(ChainRow(node, depth))
            stack.extend((by_id[c], depth + 1) for c in reversed(node.used_by))
        chains.append(Chain(exp, rows))
    return chains


def _summary(experiments: list[Experiment]) -> Summary:
    return Summary(
        improvements=[c for e in experiments for c in e.claims if c.kind == "improvement"],
        regressions=[c for e in experiments for c in e.claims if c.kind == "regression"],
        criteria_pass=[e for e in experiments if e.criteria_answer == "supported"],
        criteria_fail=[e for e in experiments if e.criteria_answer == "contradicted"],
        supported=[e for e in experiments if e.answer == "supported"],
        contradicted=[e for e in experiments if e.answer == "contradicted"],
        open=[
            e
            for e in experiments
            if e.answer == "inconclusive" or e.criteria_answer == "inconclusive"
        ],
        errors=[e for e in experiments if e.failed],
    )
