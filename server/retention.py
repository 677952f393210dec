"""What `infra-agent gc` deletes of old experiments' files, and what it never touches.

Two kinds of file grow with every call: an experiment's artifacts (<state>/artifacts/<id>/:
traces, IR, plots, per-request records) and the sandbox's job folders (<state>/jobs/*: a job's
scratch, an engine's folder). The policy, over the ledger:

- kept always: a pinned row (`infra-agent pin`), a row younger than `keep_days`, a row still
  running, and what a kept row needs: the baseline experiment its arguments name (its
  requests.jsonl draws the comparison plot), the sweep that made it (`parent_id`) and a kept
  sweep's trials (its report reads them), transitively;
- by age: the artifacts of every other row older than `max_age_days` are deleted;
- by size: while the artifacts that remain pass `max_bytes`, the oldest prunable row's go next
  (never a kept row's, so a pinned or recent set larger than the cap stays, and the report says
  by how much it is over);
- a pruned row says so: the ledger records `artifacts_pruned_at`, and reading one of its
  artifacts answers that gc deleted it, and when;
- job folders: a folder untouched for `keep_days` whose owner (an engine's server) is not alive.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

DAY_S = 86_400.0


@dataclass(frozen=True)
class Policy:
    max_age_days: float = 30.0  # artifacts of rows older than this are deleted (unless kept)
    max_bytes: int = 20 << 30  # the artifacts folder's total after gc, at most (unless kept)
    keep_days: float = 1.0  # rows (and job folders) younger than this are never touched


@dataclass
class RetentionReport:
    artifact_folders_removed: int = 0  # experiments whose artifacts were deleted
    artifact_bytes_freed: int = 0
    artifact_bytes_kept: int = 0  # what remains in <state>/artifacts
    kept_pinned: int = 0  # rows with artifacts kept because pinned
    kept_needed: int = 0  # ... because a kept row needs them (baseline, sweep, trial)
    over_cap_bytes: int = 0  # kept artifacts past max_bytes (all of them pinned, recent or needed)
    job_folders_removed: int = 0
    job_bytes_freed: int = 0
    pruned_ids: list[str] = field(default_factory=list)  # the experiments pruned, oldest first


def collect(state_dir: Path, ledger, policy: Policy, now: float | None = None) -> RetentionReport:
    """Apply `policy` to the artifacts of `ledger`'s rows and to the job folders; what it freed."""
    now = time.time() if now is None else now
    report = RetentionReport()
    rows = ledger.retention_rows()
    keep, why = _kept(rows, now, policy)
    artifacts = Path(state_dir) / "artifacts"
    sizes = {r["id"]: _size(artifacts / r["id"]) for r in rows if r["id"]}
    prunable = sorted(
        (r for r in rows if r["id"] not in keep and sizes.get(r["id"])),
        key=lambda r: r["started_at"],
    )
    total = sum(sizes.values())
    for row in prunable:  # oldest first
        old = now - row["started_at"] > policy.max_age_days * DAY_S
        if not old and total <= policy.max_bytes:
            continue
        shutil.rmtree(artifacts / row["id"], ignore_errors=True)
        ledger.mark_pruned(row["id"], now)
        total -= sizes[row["id"]]
        report.artifact_bytes_freed += sizes[row["id"]]
        report.artifact_folders_removed += 1
        report.pruned_ids.append(row["id"])
    report.artifact_bytes_kept = total
    report.over_cap_bytes = max(0, total - policy.max_bytes)
    with_files = [i for i in keep if sizes.get(i)]
    report.kept_pinned = sum(why.get(i) == "pinned" for i in with_files)
    report.kept_needed = sum(why.get(i) == "needed" for i in with_files)
    report.job_folders_removed, report.job_bytes_freed = _old_job_folders(
        Path(state_dir) / "jobs", now - policy.keep_days * DAY_S
    )
    return report


def _kept(rows: list[dict], now: float, policy: Policy) -> tuple[set[str], dict[str, str]]:
    """The rows whose artifacts gc never deletes, and why each (pinned, recent, running, needed)."""
    why: dict[str, str] = {}
    for r in rows:
        if r["pinned"]:
            why[r["id"]] = "pinned"
        elif r["status"] == "running":
            why[r["id"]] = "running"
        elif now - r["started_at"] < policy.keep_days * DAY_S:
            why[r["id"]] = "recent"
    children: dict[str, list[str]] = {}
    for r in rows:
        if r["parent_id"]:
            children.setdefault(r["parent_id"], []).append(r["id"])
    by_id = {r["id"]: r for r in rows}
    todo = list(why)
    while todo:  # what a kept row needs is kept, and what that needs
        row = by_id.get(todo.pop())
        if row is None:
            continue
        for need in [row["baseline"], row["parent_id"], *children.get(row["id"], [])]:
            if isinstance(need, str) and need in by_id and need not in why:
                why[need] = "needed"
                todo.append(need)
    return set(why), why


def _old_job_folders(jobs: Path, before: float) -> tuple[int, int]:
    """Delete job folders untouched since `before` whose owner is not alive; (count, bytes)."""
    from ..sandbox import owned_by_live_server

    removed = freed = 0
    for folder in sorted(jobs.iterdir()) if jobs.is_dir() else []:
        try:
            if not folder.is_dir() or _newest_mtime(folder) >= before:
                continue
        except OSError:
            continue
        if owned_by_live_server(folder):
            continue
        size = _size(folder)
        shutil.rmtree(folder, ignore_errors=True)
        removed, freed = removed + 1, freed + size
    return removed, freed


def _newest_mtime(folder: Path) -> float:
    newest = folder.stat().st_mtime
    for p in folder.rglob("*"):
        try:
            newest = max(newest, p.lstat().st_mtime)
        except OSError:
            pass
    return newest


def _size(folder: Path) -> int:
    if not folder.is_dir():
        return 0
    total = 0
    for p in folder.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def pruned_message(experiment_id: str, name: str, pruned_at: float) -> str:
    """What reading an artifact gc deleted answers."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(pruned_at))
    return (
        f"artifact://{experiment_id}/{name} was deleted by `infra-agent gc` on {when} (the "
        "experiment's artifacts were past the retention policy: docs/workspaces.md, 'What gc keeps'); its "
        f"recorded numbers remain in experiment://{experiment_id}. Rerun the experiment to make "
        "the file again, and `infra-agent pin` an experiment whose files you want kept"
    )
