"""What changed in the code between two experiments, from their snapshots
(kernels/snapshots.py): per file, by hash, with a unified diff of the text. Works
with or without git: the snapshots are the files each experiment ran."""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, Field

from ...kernels.snapshots import BlobStore, FileEntry, Manifest

MAX_DIFF_CHARS = 6_000  # per file, in the reply; the whole files are code://{id}/{sha256}


class FileChange(BaseModel):
    path: str = Field(description="Workspace-relative path, or 'source= (inline)' for inline code.")
    change: Literal["modified", "added", "removed"] = Field(
        description="'added': only b ran it; 'removed': only a ran it; 'modified': both, "
        "different bytes."
    )
    sha256_a: str | None = Field(description="sha256 of the file a ran; null if a did not have it.")
    sha256_b: str | None = Field(description="sha256 of the file b ran; null if b did not have it.")
    lines_added: int = Field(description="Lines only in b's version, count.")
    lines_removed: int = Field(description="Lines only in a's version, count.")
    diff: str = Field(
        description=f"Unified diff a -> b (cut at {MAX_DIFF_CHARS} chars); the "
        "whole files are code://{experiment_id}/{sha256}."
    )


def code_changes(store: BlobStore, a: Manifest, b: Manifest) -> list[FileChange]:
    """Every file whose bytes differ between the two snapshots (same hash: left out)."""
    ea, eb = a.entries(), b.entries()
    changes = []
    for path in sorted(set(ea) | set(eb)):
        fa, fb = ea.get(path), eb.get(path)
        if fa is not None and fb is not None and fa.sha256 == fb.sha256:
            continue
        changes.append(_file_change(store, path, fa, fb))
    return changes


def _file_change(
    store: BlobStore, path: str, fa: FileEntry | None, fb: FileEntry | None
) -> FileChange:
    text_a, text_b = _lines(store, fa), _lines(store, fb)
    diff = list(difflib.unified_diff(text_a or [], text_b or [], f"a/{path}", f"b/{path}"))
    body = "".join(diff)
    for side, entry, text in (("a", fa, text_a), ("b", fb, text_b)):
        if entry is not None and text is None:
            gone = f"({side}'s copy, sha256 {entry.sha256[:12]}, is gone or not text)"
            body = f"{gone}\n{body}"
    if len(body) > MAX_DIFF_CHARS:
        body = body[:MAX_DIFF_CHARS] + f"\n... ({len(body) - MAX_DIFF_CHARS} more chars)\n"
    change = "added" if fa is None else "removed" if fb is None else "modified"
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    return FileChange(
        path=path,
        change=change,
        sha256_a=fa and fa.sha256,
        sha256_b=fb and fb.sha256,
        lines_added=added,
        lines_removed=removed,
        diff=body,
    )


def _lines(store: BlobStore, entry: FileEntry | None) -> list[str] | None:
    if entry is None:
        return []
    data = store.read(entry.sha256)
    if data is None:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None
