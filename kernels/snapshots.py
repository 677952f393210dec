"""Every experiment keeps the exact code it ran: a content-addressed snapshot.

A call's snapshot holds, by workspace-relative path, every workspace file a job of the call
was handed (each goes through ``Sandbox.workspace_path``), the source files lying directly
beside it (a kernel file imports its siblings by plain name, so a rerun needs them too), the
folder of the kernel the call names (its ``spec.py`` included), and inline code arguments
(``source=``, ``*_source=``, and ``reference=``/``baseline=`` when they hold code).

Each file's bytes are stored once, as ``<state>/blobs/<sha256>``, however many experiments
hold them; the ledger row keeps the manifest (path -> sha256, size). The files are read when
the call names them, before its jobs start. A rerun of an experiment (``baseline=<id>``)
materialises its snapshot into a folder from the blobs, never from today's files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from .code_identity import RanCode, inline_name
from .workspace import Workspace, WorkspaceError

BLOBS_FOLDER = "blobs"  # <state>/blobs/<sha256>
MATERIALISED_FOLDER = "snapshots"  # <state>/snapshots/<experiment id>/: rebuilt for a rerun
# the siblings a kernel file may import
SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".h", ".hpp", ".cpp", ".c")
MAX_SNAPSHOT_BYTES = 4 << 20  # all files of one experiment's snapshot together
MAX_SNAPSHOT_FILES = 256
# gc keeps blobs written or reused this recently (s): a running call may not have closed its row yet
GC_GRACE_S = 600


class SnapshotError(WorkspaceError):
    """A snapshot cannot be taken or rebuilt; the message says what to do."""


@dataclass(frozen=True)
class FileEntry:
    sha256: str  # of the file's bytes
    size: int  # bytes


@dataclass
class Manifest:
    """What one experiment ran: workspace files by relative path, inline code by argument name."""

    files: dict[str, FileEntry] = field(default_factory=dict)
    inline: dict[str, FileEntry] = field(default_factory=dict)
    # kernel name -> its folder, workspace-relative
    kernels: dict[str, str] = field(default_factory=dict)
    # role (candidate, baseline, reference) -> the code it ran (code_identity.py); empty for a
    # row written before calls recorded it, and for tools that run no code
    ran: dict[str, RanCode] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in [*self.files.values(), *self.inline.values()])

    def entries(self) -> dict[str, FileEntry]:
        """Every item by the name people see: the relative path, or 'source= (inline)'."""
        return {**self.files, **{inline_name(arg): e for arg, e in self.inline.items()}}

    def to_json(self) -> dict:
        return {"files": {k: asdict(v) for k, v in sorted(self.files.items())},
                "inline": {k: asdict(v) for k, v in sorted(self.inline.items())},
                "kernels": dict(sorted(self.kernels.items())), "total_bytes": self.total_bytes,
                "ran": {role: code.to_json() for role, code in self.ran.items()}}

    @classmethod
    def from_json(cls, data: dict | None) -> Manifest | None:
        """None for a ledger row written before experiments kept their code."""
        if not isinstance(data, dict):
            return None
        return cls(files={k: FileEntry(**v) for k, v in (data.get("files") or {}).items()},
                   inline={k: FileEntry(**v) for k, v in (data.get("inline") or {}).items()},
                   kernels=dict(data.get("kernels") or {}),
                   ran={role: code for role, raw in (data.get("ran") or {}).items()
                        if (code := RanCode.from_json(raw)) is not None})


class BlobStore:
    """Files by the sha256 of their bytes, each stored once, under the state folder."""

    def __init__(self, state_dir: Path):
        self.root = Path(state_dir) / BLOBS_FOLDER

    def put(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        target = self.root / sha
        if target.is_file():
            os.utime(target)  # reused now: gc's grace period starts again
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            partial = self.root / f".{sha}.{os.getpid()}.{threading.get_ident()}"
            partial.write_bytes(data)
            partial.replace(target)  # atomic: a reader never sees half a blob
        return sha

    def read(self, sha: str) -> bytes | None:
        if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
            return None
        try:
            data = (self.root / sha).read_bytes()
        except OSError:
            return None
        # a damaged blob is a missing one
        return data if hashlib.sha256(data).hexdigest() == sha else None

    def shas(self) -> set[str]:
        if not self.root.is_dir():
            return set()
        return {p.name for p in self.root.iterdir()
                if len(p.name) == 64 and not p.name.startswith(".")}

    def remove(self, sha: str) -> int:
        """Delete one blob; the bytes freed."""
        path = self.root / sha
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            return 0
        return size


class SnapshotRecorder:
    """Builds one call's snapshot as its tool names code; thread-safe, each file read once."""

    def __init__(self, workspace: Workspace):
        self.root = workspace.root.resolve()
        self.store = BlobStore(workspace.state_dir)
        self._hidden = workspace.state_dir.resolve()
        self._manifest = Manifest()
        self._folders: set[Path] = set()
        self._lock = threading.Lock()

    def manifest(self) -> Manifest:
        with self._lock:
            m = self._manifest
            return Manifest(dict(m.files), dict(m.inline), dict(m.kernels), dict(m.ran))

    def add_kernel(self, name: str, folder: Path) -> None:
        with self._lock:
            self._manifest.kernels[name] = self._relative(folder.resolve())
            self._add_folder(folder.resolve())

    def add_file(self, host_path: Path) -> None:
        """A workspace file a job is handed, and the source files beside it."""
        host = Path(host_path).resolve()
        with self._lock:
            if host.is_dir():  # a folder handed to a job: the source files directly in it
                self._add_folder(host)
                return
            self._add(host)
            self._add_folder(host.parent)

    def add_ran(self, ran: dict[str, RanCode]) -> None:
        """What each role of the call runs; the workspace files it imports join the snapshot
        (a rerun needs them too)."""
        with self._lock:
            self._manifest.ran.update(ran)
            for code in ran.values():
                for rel in code.files:
                    host = self.root / rel
                    if host.is_file():
                        self._add(host.resolve())

    def add_inline(self, argument: str, text: str) -> None:
        data = text.encode("utf-8", "surrogatepass")
        with self._lock:
            self._check_room(data)
            self._manifest.inline[argument] = FileEntry(self.store.put(data), len(data))

    def _add_folder(self, folder: Path) -> None:
        if folder in self._folders:
            return
        self._folders.add(folder)
        try:
            paths = sorted(folder.iterdir())
        except OSError as exc:
            raise SnapshotError(f"cannot list {folder.name}/ to keep the code it holds: "
                                f"{exc.strerror}") from None
        for path in paths:
            if path.suffix in SOURCE_SUFFIXES and path.is_file():
                self._add(path.resolve())

    def _add(self, host: Path) -> None:
        if not host.is_relative_to(self.root) or host.is_relative_to(self._hidden):
            return  # a link out of the workspace, or the server's own state: no job sees it
        rel = self._relative(host)
        if rel in self._manifest.files:
            return
        try:
            data = host.read_bytes()
        except OSError as exc:
            raise SnapshotError(f"cannot read {rel} to keep a copy of the code this call runs: "
                                f"{exc.strerror}; make it readable or move it out of the "
                                "folder") from None
        self._check_room(data, rel)
        self._manifest.files[rel] = FileEntry(self.store.put(data), len(data))

    def _relative(self, host: Path) -> str:
        return host.relative_to(self.root).as_posix()

    def _check_room(self, data: bytes, rel: str | None = None) -> None:
        total = self._manifest.total_bytes + len(data)
        count = len(self._manifest.files) + len(self._manifest.inline) + 1
        if total <= MAX_SNAPSHOT_BYTES and count <= MAX_SNAPSHOT_FILES:
            return
        largest = sorted(self._manifest.files.items(), key=lambda kv: -kv[1].size)[:3]
        named = ", ".join(f"{path} ({e.size} B)" for path, e in largest)
        raise SnapshotError(
            f"the code this call runs is over the snapshot cap ({MAX_SNAPSHOT_FILES} files, "
            f"{MAX_SNAPSHOT_BYTES >> 20} MiB: every experiment keeps a copy of the code it ran) at "
            f"{rel or 'inline code'}: {count} files, {total} bytes; largest so far: "
            f"{named or 'none'}. A snapshot holds the named files and the source files beside "
            "them (.py, .cu, .cuh, .h): "
            "move unrelated or generated files out of the kernel's folder")


@dataclass(frozen=True)
class GcReport:
    blobs_removed: int
    bytes_freed: int
    blobs_kept: int  # referenced by a ledger row, or younger than GC_GRACE_S
    rebuilt_folders_removed: int  # <state>/snapshots/*: rebuilt for reruns, made again on demand


def collect_garbage(state_dir: Path, referenced: set[str], now: float) -> GcReport:
    """Delete the blobs no ledger row references (and older than GC_GRACE_S), and the folders
    rebuilt for reruns; what a row references is never touched."""
    store = BlobStore(state_dir)
    removed = freed = kept = 0
    for sha in sorted(store.shas()):
        try:
            young = now - (store.root / sha).stat().st_mtime < GC_GRACE_S
        except OSError:
            continue
        if sha in referenced or young:
            kept += 1
            continue
        freed += store.remove(sha)
        removed += 1
    rebuilt = Path(state_dir) / MATERIALISED_FOLDER
    folders = [p for p in rebuilt.iterdir() if p.is_dir()] if rebuilt.is_dir() else []
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    return GcReport(removed, freed, kept, len(folders))


def materialise(store: BlobStore, manifest: Manifest, dest: Path) -> Path:
    """Write a snapshot's files under `dest` in their recorded layout, read-only; `dest`."""
    if dest.exists():
        shutil.rmtree(dest)
    for rel, entry in manifest.files.items():
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or ".." in parts:
            raise SnapshotError(f"the snapshot names {rel!r}, which is not a relative path")
        data = store.read(entry.sha256)
        if data is None:
            raise SnapshotError(missing_blob_message(rel, entry.sha256))
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o444)  # the copy a job gets is read-only, as the workspace is
    return dest


def inline_text(store: BlobStore, manifest: Manifest, argument: str) -> str | None:
    entry = manifest.inline.get(argument)
    if entry is None:
        return None
    data = store.read(entry.sha256)
    if data is None:
        raise SnapshotError(missing_blob_message(inline_name(argument), entry.sha256))
    return data.decode("utf-8", "surrogatepass")


def missing_blob_message(name: str, sha: str) -> str:
    return (f"the stored copy of {name} (sha256 {sha[:12]}) is gone from the state folder's blobs "
            "(deleted by hand?); this experiment's code cannot be rebuilt: rerun it with this "
            "version")
