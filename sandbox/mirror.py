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
    its bytes, made once per content (a file is re-read only when its size, mtime or mode
    moved)."""

    def __init__(self, root: Path, hidden: tuple[str, ...]):
        self.root = root
        self.hidden = {str(Path(h)) for h in hidden}  # relative folders never sent
        # rel -> (size, mtime, mode, entry): a file is read again when one of the three moves
        self._known: dict[str, tuple[int, int, int, ManifestEntry]] = {}
        self._version: WorkspaceVersion | None = None

    def version(self, ray: Any) -> WorkspaceVersion:
        """The workspace now; its manifest is put into Ray's object store once per version.
        Per job this is a stat of each file (a walk of the zoo: ~0.4 ms); a file is read and
        hashed again only when its size, mtime or mode moved."""
        manifest, changed = self._manifest(ray)
        if self._version is not None and not changed:
            return self._version
        digest = hashlib.sha256(
            "\n".join(
                f"{rel}\0{e.sha256}\0{e.mode}" for rel, e in sorted(manifest.items())
            ).encode()
        ).hexdigest()
        if self._version is None or self._version.digest != digest:
            self._version = WorkspaceVersion(digest, [ray.put(manifest)])
        return self._version

    def _manifest(self, ray: Any) -> tuple[dict[str, ManifestEntry], bool]:
        """Every regular file by relative path (a symlink to one: its target's bytes, as a job
        reading it sees them), and whether any was added, changed or removed since last time."""
        out: dict[str, ManifestEntry] = {}
        changed = False
        total = 0
        pending = [(str(self.root), "")]
        while pending:
            folder, prefix = pending.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                rel = prefix + entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in SKIPPED_DIRS and rel not in self.hidden:
                            pending.append((entry.path, rel + "/"))
                        continue
                    st = entry.stat()
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                total += st.st_size
                if total > WORKSPACE_LIMIT:
                    raise SandboxError(
                        f"the workspace holds more than {WORKSPACE_LIMIT >> 20} MiB of files to "
                        "send to the cluster's nodes; move data out of it (checkpoints, traces)"
                    )
                known = self._known.get(rel)
                mode = st.st_mode & 0o755
                if known is None or known[:3] != (st.st_size, st.st_mtime_ns, mode):
                    try:
                        data = Path(entry.path).read_bytes()
                    except OSError:
                        continue
                    made = ManifestEntry(
                        sha256=hashlib.sha256(data).hexdigest(), mode=mode, blob=ray.put(data)
                    )
                    known = (st.st_size, st.st_mtime_ns, mode, made)
                    self._known[rel] = known
                    changed = True
                out[rel] = known[3]
        for rel in [r for r in self._known if r not in out]:
            del self._known[rel]
            changed = True
        return out, changed
