"""What changed in the code between two experiments, from their snapshots
(kernels/snapshots.py): per role, the code it ran (kernels/code_identity.py: the entry's
function and files), and per file, by hash, with a unified diff of the text. Works
with or without git: the snapshots are the files each experiment ran."""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, Field

from ...kernels.code_identity import ROLES, RanCode, function_text
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


class RoleCode(BaseModel):
    role: str = Field(description="'candidate', 'baseline' or 'reference': what the code was for.")
    a: str | None = Field(
        description="What a ran in this role: its label and 'file:function'; null: a had none."
    )
    b: str | None = Field(description="The same for b.")
    same_code: bool | None = Field(
        description="True: the same function in the same files, byte for byte (the entry's file "
        "and the workspace files it imports); False: not; null: only one side had this role."
    )
    words: str = Field(description="The difference in words, e.g. 'one file, two functions'.")
    diff: str = Field(
        default="",
        description=f"When the two called different functions: a unified diff of their source "
        f"a -> b (cut at {MAX_DIFF_CHARS} chars); an edit of one entry's files is in `files`.",
    )


def role_changes(store: BlobStore, a: Manifest, b: Manifest) -> list[RoleCode]:
    """Per role either side ran (code_identity.py), whether the code each ran is the same."""
    return [
        _role_change(store, role, a.ran.get(role), b.ran.get(role))
        for role in sorted(set(a.ran) | set(b.ran), key=_role_order)
    ]


def ran_paths(a: Manifest, b: Manifest) -> set[str]:
    """Every file some role of either side ran."""
    return {path for m in (a, b) for code in m.ran.values() for path in code.files}


def _role_order(role: str) -> int:
    return ROLES.index(role) if role in ROLES else len(ROLES)


def _role_change(store: BlobStore, role: str, a: RanCode | None, b: RanCode | None) -> RoleCode:
    shown_a = f"{a.label} ({a.where})" if a else None
    shown_b = f"{b.label} ({b.where})" if b else None
    same_code, words, diff = _compare(store, role, a, b, shown_a, shown_b)
    return RoleCode(role=role, a=shown_a, b=shown_b, same_code=same_code, words=words, diff=diff)


def _compare(
    store: BlobStore,
    role: str,
    a: RanCode | None,
    b: RanCode | None,
    shown_a: str | None,
    shown_b: str | None,
) -> tuple[bool | None, str, str]:
    """RoleCode's same_code, words and diff for what a and b ran in one role."""
    if a is None or b is None:
        side, shown = ("b", shown_b) if a is None else ("a", shown_a)
        return None, f"only {side} ran a {role}: {shown}", ""
    if a.same_code(b):
        return True, f"{role} same: {a.where}", ""
    if not a.same_entry(b):
        if a.files == b.files:
            how = "one file, two functions (the file is the same)"
        elif a.entry_file == b.entry_file:
            how = "two functions of one file, and the file differs too"
        else:
            how = "different files"
        return False, f"{role} {shown_a} -> {shown_b}: {how}", _function_diff(store, a, b)
    moved = sorted(p for p in set(a.files) | set(b.files) if a.files.get(p) != b.files.get(p))
    own = (
        "the function's own text is the same: something else in its files changed"
        if a.function_sha256 is not None and a.function_sha256 == b.function_sha256
        else "the function's own text changed"
    )
    return False, f"{role} {a.where} edited: {', '.join(moved)} ({own})", ""


def _function_diff(store: BlobStore, a: RanCode, b: RanCode) -> str:
    text_a, text_b = _entry_text(store, a), _entry_text(store, b)
    if text_a is None or text_b is None:
        return ""
    lines = difflib.unified_diff(
        text_a.splitlines(keepends=True),
        text_b.splitlines(keepends=True),
        f"a/{a.where}",
        f"b/{b.where}",
    )
    body = "".join(lines)
    if len(body) > MAX_DIFF_CHARS:
        body = body[:MAX_DIFF_CHARS] + f"\n... ({len(body) - MAX_DIFF_CHARS} more chars)\n"
    return body


def _entry_text(store: BlobStore, code: RanCode) -> str | None:
    """The function's source from the stored copy of its file (the whole file if not found)."""
    sha = code.files.get(code.entry_file)
    data = store.read(sha) if sha else None
    if data is None:
        return None
    text = data.decode("utf-8", "replace")
    return function_text(text, code.function) or text


CodeRelation = Literal["same", "changed", "other code"]


def code_relation(a: Manifest, b: Manifest) -> CodeRelation | None:
    """Over the roles both ran: 'same' code, 'changed' (the same functions, their files
    edited), or 'other code' (some role called another function or file: an alternative, not
    an edit); None when they share no role (rows without roles: compare the snapshots)."""
    shared = [role for role in a.ran if role in b.ran]
    if not shared:
        return None
    if all(a.ran[r].same_code(b.ran[r]) for r in shared):
        return "same"
    if all(a.ran[r].same_entry(b.ran[r]) for r in shared):
        return "changed"
    return "other code"
