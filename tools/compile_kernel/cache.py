"""The per-workspace compile cache: same source, target and options -> same answer.

An entry is the worker's raw result plus the files it wrote (IR, SASS, cubin), stored
under ``<state_dir>/compile-cache/<key>/``; the judge re-reads them on a hit, so a cached
answer is computed exactly like a fresh one. The key covers everything that changes
the compiler's output: the source text, the job payload (entry, signature, example
shape, target, options, flags), the Triton version, and this format's version.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

FORMAT_VERSION = 2  # 2: SASS with line info (loops), the launch (grid, scalars, outputs)
RAW_FILE = "raw.json"


def cache_key(kind: str, code: str, payload: dict, target: str, entry: str | None) -> str:
    try:
        triton_version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton_version = "none"
    parts = {
        "format": FORMAT_VERSION,
        "kind": kind,
        "triton": triton_version,
        "target": target,
        "entry": entry,
        "code": hashlib.sha256(code.encode()).hexdigest(),
        # the payload minus the inline source (hashed above) and host-specific paths
        "payload": {k: v for k, v in payload.items() if k not in ("source", "path")},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


class CompileCache:
    def __init__(self, root: Path):
        self.root = Path(root)

    def get(self, key: str) -> tuple[dict, Path] | None:
        folder = self.root / key
        try:
            raw = json.loads((folder / RAW_FILE).read_text())
        except (OSError, ValueError):
            return None
        if not all((folder / name).is_file() for name in raw.get("files", [])):
            return None  # a partly deleted entry: compile again
        return raw, folder

    def put(self, key: str, raw: dict, out_dir: Path | None) -> tuple[dict, Path]:
        """Copy the job's files in and publish the entry atomically (rename), so a
        concurrent reader sees a whole entry or none."""
        self.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=self.root))
        kept = []
        for name in raw.get("files", []):  # the worker's list is untrusted: plain files only
            src = Path(out_dir or "") / str(name)
            if _plain_name(str(name)) and src.is_file() and not src.is_symlink():
                shutil.copyfile(src, staging / name)
                kept.append(name)
        raw = {**raw, "files": kept}
        (staging / RAW_FILE).write_text(json.dumps(raw))
        final = self.root / key
        try:
            os.rename(staging, final)
        except OSError:  # another call stored the same key first: keep theirs
            shutil.rmtree(staging, ignore_errors=True)
        return raw, final


def _plain_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..") and not name.startswith(".")
