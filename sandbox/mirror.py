"""The workspace as the cluster's nodes see it (cluster.py sends, node.py syncs to it).

    mirror = WorkspaceMirror(workspace, hidden)
    version = mirror.version(ray)      # a digest of every (path, sha256), and its manifest in Ray

Each file's bytes are put into Ray's object store once per content; a node fetches only the files
whose hash it does not hold yet.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from .errors import SandboxError
from .node import ManifestEntry, WorkspaceVersion

WORKSPACE_LIMIT = 256 << 20  # bytes of workspace mirrored to the nodes
SKIPPED_DIRS = {".git", "__pycache__", ".pytest_cache", ".venv", "node_modules"}


class WorkspaceMirror:
    """The workspace as a manifest the nodes sync to: each file's hash and a Ray object of
    its bytes, made once per content (a file is re-read only when its size or mtime moved)."""

    def __init__(self, root: Path, hidden: tuple[str, ...]):
        self.root = root
        self.hidden = tuple(Path(h) for h in hidden)
        self._known: dict[str, tuple[int, int, ManifestEntry]] = {}  # rel -> (size, mtime, entry)
        self._version: WorkspaceVersion | None = None

    def version(self, ray: Any) -> WorkspaceVersion:
        """The workspace now; its manifest is put into Ray's object store once per version."""
        manifest = self.manifest(ray)
        digest = hashlib.sha256(
            "\n".join(
                f"{rel}\0{e.sha256}\0{e.mode}" for rel, e in sorted(manifest.items())
            ).encode()
        ).hexdigest()
        if self._version is None or self._version.digest != digest:
            self._version = WorkspaceVersion(digest, [ray.put(manifest)])
        return self._version

    def manifest(self, ray: Any) -> dict[str, ManifestEntry]:
        out: dict[str, ManifestEntry] = {}
        total = 0
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel_dir = Path(dirpath).relative_to(self.root)
            dirnames[:] = [
                d
                for d in dirnames
                if d not in SKIPPED_DIRS
                and not any((rel_dir / d).is_relative_to(h) for h in self.hidden)
            ]
            for name in filenames:
                path = Path(dirpath) / name
                try:
                    st = path.stat()
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                rel = str(rel_dir / name)
                total += st.st_size
                if total > WORKSPACE_LIMIT:
                    raise SandboxError(
                        f"the workspace holds more than {WORKSPACE_LIMIT >> 20} MiB of files to "
                        "send to the cluster's nodes; move data out of it (checkpoints, traces)"
                    )
                known = self._known.get(rel)
                if known is None or known[:2] != (st.st_size, st.st_mtime_ns):
                    data = path.read_bytes()
                    entry = ManifestEntry(
                        sha256=hashlib.sha256(data).hexdigest(),
                        mode=st.st_mode & 0o755,
                        blob=ray.put(data),
                    )
                    known = (st.st_size, st.st_mtime_ns, entry)
                    self._known[rel] = known
                out[rel] = known[2]
        for rel in [r for r in self._known if r not in out]:
            del self._known[rel]
        return out
