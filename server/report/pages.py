"""What one experiment's page shows beyond its ledger row: the code diff against the
experiment it is compared with (from the code snapshots: per role, the function and files it
ran), the conditions it ran under against its baseline (the same code timed differently: the
host drifted) with the in-call A/B that is the evidence, then the result fields that moved
against its baseline (compare_experiments' diff, cross-call), and its artifacts, copied into the site
so the page opens from disk, and each IR or assembly dump diffed against the baseline's
(compile_kernel's kernel.sass against its baseline's). An artifact whose file is
gone (pruned, or a plot that was never drawn) is listed as missing, never an error."""

from __future__ import annotations

import difflib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ...kernels.snapshots import BlobStore, FileEntry, Manifest
from ...tools.common.code_diff import (
    MAX_DIFF_CHARS,
    FileChange,
    RoleCode,
    code_changes,
    ran_paths,
    role_changes,
)
from ...tools.common.diff import Change
from ...tools.common.provenance import devices_ran_on
from ...tools.common.timing_conditions import (
    InCallAB,
    TimedCall,
    TimingCondition,
    in_call_evidence,
    timing_conditions,
)
from ...tools.compare_experiments import diff_results
from ..resources import is_text, mime_type_of
from .model import Report
from .rows import Experiment

MAX_INLINE_TEXT = 60_000  # characters of a text artifact shown on the page; the file is linked
MAX_RESULT_CHANGES = 30  # result fields shown moved against the baseline, largest first
BASELINE_TWIN = "baseline-"  # prefix of an artifact stored for the baseline's side
# IR and assembly dumps: diffed against the baseline's (other text artifacts are shown only)
IR_SUFFIXES = {".ttir", ".ttgir", ".llir", ".ll", ".ptx", ".sass", ".amdgcn", ".mlir"}
SITE_ARTIFACTS = "artifacts"  # folder of the site the files are copied into
PERFETTO_HOWTO = (
    "Open https://ui.perfetto.dev in a browser, choose 'Open trace file' and pick the "
    "downloaded file: the trace is read in your browser, nothing is uploaded."
)

ArtifactKind = Literal["image", "text", "trace", "binary"]


@dataclass(frozen=True)
class Artifact:
    name: str
    kind: ArtifactKind
    present: bool  # False: the file is gone from the state folder
    href: str  # relative to the site's root
    size_bytes: int
    text: str | None  # a text artifact's content, cut at MAX_INLINE_TEXT
    cut: bool  # the text was cut


@dataclass(frozen=True)
class ArtifactDiff:
    name: str  # the artifact, e.g. kernel.sass
    diff: str  # unified, the baseline's -> this experiment's, cut at MAX_DIFF_CHARS


@dataclass(frozen=True)
class ExperimentPage:
    experiment: Experiment
    code_changes: list[FileChange]  # against experiment.code_against; empty when the same
    code_roles: list[RoleCode]  # per role, the code each ran, against experiment.code_against
    conditions: list[TimingCondition]  # against its baseline: drift, device; drift first
    in_call: list[InCallAB]  # its own A/B, interleaved in one job: the evidence
    result_changes: list[Change]  # numeric fields against the baseline, largest ratio first
    num_result_changes: int  # before the cut at MAX_RESULT_CHANGES
    artifacts: list[Artifact]
    artifact_diffs: list[ArtifactDiff]
    perfetto_howto: str = PERFETTO_HOWTO

    @property
    def code_arguments(self) -> dict[str, str]:
        """Inline code (source=, baseline_source=, reference=): shown as blocks of code."""
        return {k: v for k, v in self.experiment.arguments.items() if _is_code(k, v)}

    @property
    def plain_arguments(self) -> dict:
        return {k: v for k, v in self.experiment.arguments.items() if not _is_code(k, v)}

    @property
    def has_trace(self) -> bool:
        return any(a.kind == "trace" and a.present for a in self.artifacts)


# One diff per pair of snapshots: a night retries the same edit against the same baseline.
DiffCache = dict[tuple[frozenset[tuple[str, FileEntry]], ...], list[FileChange]]


def experiment_page(
    report: Report, exp: Experiment, site: Path | None, diffs: DiffCache
) -> ExperimentPage:
    changes: list[FileChange] = []
    roles: list[RoleCode] = []
    against = report.by_id.get(exp.code_against or "")
    if exp.code_state in ("changed", "other code") and against is not None:
        assert exp.code is not None and against.code is not None  # both states compare two
        store = BlobStore(report.state_dir)
        key = (_items(against.code), _items(exp.code))
        if key not in diffs:
            diffs[key] = code_changes(store, against.code, exp.code)
        ran = ran_paths(against.code, exp.code)
        changes = [f for f in diffs[key] if not ran or f.path in ran]
        roles = [r for r in role_changes(store, against.code, exp.code) if r.same_code is False]
    baseline = report.by_id.get(exp.baseline_id or "")
    conditions, in_call = _conditions(report, baseline, exp)
    moved = _result_changes(baseline, exp)
    artifacts = [_artifact(report.state_dir, exp.id, name, site) for name in exp.artifact_names]
    return ExperimentPage(
        exp,
        changes,
        roles,
        conditions,
        in_call,
        moved[:MAX_RESULT_CHANGES],
        len(moved),
        artifacts,
        _artifact_diffs(report.state_dir, exp, baseline, artifacts),
    )


def _conditions(
    report: Report, baseline: Experiment | None, exp: Experiment
) -> tuple[list[TimingCondition], list[InCallAB]]:
    """How it ran against its baseline experiment (timing_conditions.py), and its in-call A/B."""
    mine = _timed(exp)
    in_call = in_call_evidence(mine)
    if baseline is None or not baseline.result or not exp.result:
        return [], in_call

    def arguments_of(eid: str) -> dict | None:
        found = report.by_id.get(eid)
        return found.arguments if found is not None else None

    return timing_conditions(_timed(baseline), mine, arguments_of), in_call


def _timed(exp: Experiment) -> TimedCall:
    devices = devices_ran_on({"nodes": exp.nodes, "device_fingerprint": exp.device_fingerprint})
    ran = exp.code.ran if exp.code is not None else {}
    return TimedCall(exp.id, exp.tool, exp.arguments, exp.result, ran, devices)


def _result_changes(baseline: Experiment | None, exp: Experiment) -> list[Change]:
    if baseline is None or not baseline.result or not exp.result:
        return []
    numeric = diff_results(baseline.result, exp.result)["numeric_changes"]
    return sorted(numeric, key=lambda c: -abs((c.ratio or 1.0) - 1.0))


def _artifact_diffs(
    state_dir: Path, exp: Experiment, baseline: Experiment | None, artifacts: list[Artifact]
) -> list[ArtifactDiff]:
    """Each IR or assembly dump against the baseline's: the twin this call stored for its
    baseline (baseline-kernel.sass), else the baseline experiment's own file of that name."""
    diffs = []
    present = {a.name for a in artifacts if a.present}
    for name in sorted(present):
        if Path(name).suffix not in IR_SUFFIXES or name.startswith(BASELINE_TWIN):
            continue
        before = None
        if BASELINE_TWIN + name in present:
            before = artifact_file(state_dir, exp.id, BASELINE_TWIN + name)
        elif baseline is not None and name in baseline.artifact_names:
            before = artifact_file(state_dir, baseline.id, name)
        if before is None or not before.is_file():
            continue
        lines = difflib.unified_diff(
            before.read_text(errors="replace").splitlines(keepends=True),
            artifact_file(state_dir, exp.id, name).read_text(errors="replace").splitlines(True),
            f"baseline/{name}",
            name,
        )
        body = "".join(lines) or "(the same text)\n"
        if len(body) > MAX_DIFF_CHARS:
            body = body[:MAX_DIFF_CHARS] + f"\n... ({len(body) - MAX_DIFF_CHARS} more chars)\n"
        diffs.append(ArtifactDiff(name, body))
    return diffs


def _items(manifest: Manifest) -> frozenset[tuple[str, FileEntry]]:
    return frozenset(manifest.entries().items())


def _is_code(name: str, value: object) -> bool:
    return isinstance(value, str) and name.endswith(("source", "reference")) and "\n" in value


def artifact_kind(name: str) -> ArtifactKind:
    lower = name.lower()
    if "trace" in lower and lower.endswith((".json", ".json.gz", ".pb", ".perfetto-trace")):
        return "trace"  # a trace is for Perfetto, not for reading as text
    mime = mime_type_of(name)
    if mime.startswith("image/"):
        return "image"
    return "text" if is_text(mime) else "binary"


def artifact_file(state_dir: Path, experiment_id: str, name: str) -> Path:
    return state_dir / "artifacts" / experiment_id / name


def _artifact(state_dir: Path, experiment_id: str, name: str, site: Path | None) -> Artifact:
    source = artifact_file(state_dir, experiment_id, name)
    href = f"{SITE_ARTIFACTS}/{experiment_id}/{name}"
    kind = artifact_kind(name)
    if not source.is_file():
        return Artifact(name, kind, False, href, 0, None, False)
    if site is not None:
        target = site / href
        target.parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(source, target)
    text, cut = None, False
    if kind == "text":
        with source.open("rb") as f:
            head = f.read(MAX_INLINE_TEXT + 1)
        text, cut = head[:MAX_INLINE_TEXT].decode("utf-8", "replace"), len(head) > MAX_INLINE_TEXT
    return Artifact(name, kind, True, href, source.stat().st_size, text, cut)


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link where the site is on the same file system (traces can be large); a copy
    otherwise. Either way the site keeps its file when the state folder is pruned."""
    if target.exists():
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
