"""The code an earlier experiment ran, rebuilt from its snapshot (kernels/snapshots.py), for a
tool that reruns it as a baseline. Never today's file: an edited impl would otherwise be
timed against itself (a silent A/A).

The snapshot's files are materialised under ``<state>/snapshots/<this call>/`` and reach the
job as a copy in its own folder (``Job.inputs``), so the job names them by a path relative to
its folder (``in/snapshot/<recorded path>``) and imports their siblings from the snapshot too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ...kernels.coderef import CodeRef, impl_code
from ...kernels.snapshots import (
    MATERIALISED_FOLDER,
    BlobStore,
    Manifest,
    SnapshotError,
    inline_text,
    materialise,
)
from ...kernels.workspace import Kernel, WorkspaceError, _load_spec
from ..base import AgentError, ToolContext, as_agent_error

JOB_INPUT_NAME = "snapshot"  # Job.inputs name: the job sees the files under in/snapshot/


RERUN = "rerun it with this version and name the new experiment"


@dataclass(frozen=True)
class RecordedCode:
    code: CodeRef  # path (if any) is the materialised host copy
    folder: Path | None  # the materialised snapshot, copied into the job; None for inline source
    job_path: str | None  # the file as the job names it (relative to its folder); None for source
    label: str  # what ran, for people: the impl, 'source' or the recorded path


def recorded_code(ctx: ToolContext, record: dict, kernel: Kernel, tool_call: str) -> RecordedCode:
    """Experiment `record`'s candidate code (impl, path= or source=) as it ran then.
    `tool_call` says how to rerun it, for the refusal when there is no snapshot."""
    eid = record["id"]
    manifest = Manifest.from_json(record.get("code"))
    if manifest is None:
        raise AgentError(
            f"experiment {eid} was recorded before experiments kept the code they ran (its ledger "
            "row has no code snapshot), so it cannot be rerun as it ran: today's files may differ "
            f"from what it timed. Rerun that code now ({tool_call}) and name the new experiment as "
            "the baseline, or name an impl (baseline=<impl>) to use today's file knowingly"
        )
    store = BlobStore(ctx.workspace.state_dir)
    args = record.get("arguments") or {}
    with as_agent_error(SnapshotError):
        if args.get("source") is not None:
            text = inline_text(store, manifest, "source")
            if text is None:
                raise AgentError(f"experiment {eid}'s snapshot holds no source=; {RERUN}")
            return RecordedCode(CodeRef(entry=args.get("entry"), source=text), None, None, "source")
        dest = ctx.workspace.state_dir / MATERIALISED_FOLDER / ctx.experiment_id
        folder = materialise(store, manifest, dest)
    if args.get("path") is not None:
        rel = _workspace_relative(ctx, args["path"])
        code = CodeRef(entry=args.get("entry"), path=folder / rel)
        label = rel
    else:
        code = _recorded_impl(eid, manifest, folder, kernel, args.get("impl"))
        assert code.path is not None and code.impl is not None  # an impl names a function in a file
        rel, label = code.path.relative_to(folder).as_posix(), code.impl
    if rel not in manifest.files:
        raise AgentError(f"experiment {eid}'s snapshot has no {rel}; {RERUN}")
    return RecordedCode(code, folder, f"in/{JOB_INPUT_NAME}/{rel}", label)


def _recorded_impl(
    eid: str, manifest: Manifest, folder: Path, kernel: Kernel, impl: str | None
) -> CodeRef:
    """The impl as the experiment's own spec.py named it (the spec may have changed since)."""
    kernel_folder = manifest.kernels.get(kernel.spec.name)
    spec_rel = None
    if kernel_folder is not None:
        spec_rel = (PurePosixPath(kernel_folder) / "spec.py").as_posix()
    if spec_rel not in manifest.files:
        raise AgentError(
            f"experiment {eid}'s snapshot does not hold {kernel.spec.name}'s spec.py; {RERUN}"
        )
    spec_file = folder / spec_rel
    with as_agent_error(WorkspaceError):
        try:
            spec = _load_spec(spec_file)
        except WorkspaceError:
            raise
        except Exception as exc:  # the recorded spec no longer loads with today's schema
            raise WorkspaceError(
                f"experiment {eid}'s recorded spec.py does not load today "
                f"({type(exc).__name__}: {exc}); {RERUN}"
            ) from None
        return impl_code(Kernel(spec=spec, folder=spec_file.parent), impl, allow_reference=True)


def _workspace_relative(ctx: ToolContext, path: str) -> str:
    root = ctx.workspace.root.resolve()
    try:
        return (root / path).resolve().relative_to(root).as_posix()
    except (ValueError, OSError):
        raise AgentError(f"the recorded path {path!r} is not a workspace file") from None
