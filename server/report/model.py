"""The report's view of the ledger: its experiments (rows.py), their chains of baselines,
and the summary a person reads first. Everything here is read from the ledger rows alone
(cheap, also for 10,000 rows); the code diff and the artifacts of one experiment are read
when its page is made (pages.py).

A chain is an experiment that names no baseline in this report plus every experiment that
names it as baseline, transitively: the story of one line of attack.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from pathlib import Path

from ...kernels.snapshots import Manifest
from ...tools.common.code_diff import code_relation
from ...tools.list_experiments import iso
from ..ledger import read_only_rows
from .numbers import Claim
from .rows import Experiment, experiment_from_row


@dataclass(frozen=True)
class Filters:
    since: float | None = None  # Unix s, inclusive
    until: float | None = None  # Unix s, exclusive
    kernel: str | None = None
    sweep: str | None = None  # a sweep's experiment id: only it and its trials

    def words(self) -> str:
        parts = [f"since {iso(self.since)}" if self.since is not None else ""]
        parts.append(f"until {iso(self.until)}" if self.until is not None else "")
        parts.append(f"kernel {self.kernel}" if self.kernel else "")
        parts.append(f"sweep {self.sweep} and its trials" if self.sweep else "")
        return ", ".join(p for p in parts if p) or "the whole ledger"


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
    improvements: list[Claim]  # faster because of a change of the code
    regressions: list[Claim]  # slower because of a change of the code
    comparisons: list[Claim]  # alternatives timed side by side: not a change to the stack
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
    summary: Summary  # over the experiments that are not trials of a sweep in the report
    num_folded_trials: int  # trials shown on their sweep's page, not in the timeline

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
        if filters.sweep:
            rows = [r for r in rows if filters.sweep in (r["id"], r.get("parent_id"))]
        experiments = [experiment_from_row(row) for row in rows]
    finally:
        gc.enable()
    by_id = {e.id: e for e in experiments}
    _link_baselines(experiments, by_id)
    _link_trials(experiments, by_id)
    top_level = [e for e in experiments if not is_trial_here(e, by_id)]
    _compare_code(experiments, by_id)
    return Report(
        state_dir=state_dir,
        filters=filters,
        generated_at=time.time(),
        ledger_exists=ledger.is_file(),
        experiments=experiments,
        by_id=by_id,
        chains=_chains(experiments, by_id),
        summary=_summary(top_level),
        num_folded_trials=len(experiments) - len(top_level),
    )


def _link_baselines(experiments: list[Experiment], by_id: dict[str, Experiment]) -> None:
    for exp in experiments:
        if exp.baseline_id in by_id:
            by_id[exp.baseline_id].used_by.append(exp.id)


def _link_trials(experiments: list[Experiment], by_id: dict[str, Experiment]) -> None:
    for exp in experiments:
        if exp.parent_id in by_id:
            by_id[exp.parent_id].trials.append(exp.id)


def is_trial_here(exp: Experiment, by_id: dict[str, Experiment]) -> bool:
    """A trial whose sweep is in the report: its sweep's page lists it, the timeline does not
    (a sweep makes dozens). A trial whose sweep is outside the window stays a row."""
    return exp.parent_id is not None and exp.parent_id in by_id


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
            continue
        # the code each role ran (the entry and its imports), else the whole snapshot
        relation = code_relation(against.code, exp.code)
        if relation is not None:
            exp.code_state = relation
        elif _hashes(exp.code) == _hashes(against.code):
            exp.code_state = "same"
        else:
            exp.code_state = "changed"


def _hashes(manifest: Manifest) -> dict[str, str]:
    return {path: entry.sha256 for path, entry in manifest.entries().items()}


def _chains(experiments: list[Experiment], by_id: dict[str, Experiment]) -> list[Chain]:
    """Trials of a sweep in the report are left out: the sweep's row counts them."""
    chains = []
    for exp in experiments:
        if is_trial_here(exp, by_id):
            continue
        if exp.baseline_id in by_id and not is_trial_here(by_id[exp.baseline_id], by_id):
            continue  # drawn under its baseline's chain
        rows: list[ChainRow] = []
        stack = [(exp, 0)]
        while stack:  # depth first, children in ledger order
            node, depth = stack.pop()
            rows.append(ChainRow(node, depth))
            named = [by_id[c] for c in node.used_by if not is_trial_here(by_id[c], by_id)]
            stack.extend((c, depth + 1) for c in reversed(named))
        chains.append(Chain(exp, rows))
    return chains


def _summary(experiments: list[Experiment]) -> Summary:
    return Summary(
        improvements=[c for e in experiments for c in e.claims if c.kind == "improvement"],
        regressions=[c for e in experiments for c in e.claims if c.kind == "regression"],
        comparisons=[c for e in experiments for c in e.claims if c.kind == "comparison"],
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
