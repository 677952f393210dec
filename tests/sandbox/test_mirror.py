"""The workspace manifest the cluster's nodes sync to (sandbox/mirror.py), checked against a
second walk of the same folder (pathlib and hashlib, nothing the mirror shares): every regular
file a job could read, with its bytes' sha256, and nothing from the skipped or hidden folders;
a new version exactly when a file's bytes, a file's presence or its mode change."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from infra_agent.sandbox.mirror import SKIPPED_DIRS, WorkspaceMirror


class ObjectStore:
    """Ray's put, as the mirror uses it: a handle for bytes (here the bytes themselves)."""

    def __init__(self) -> None:
        self.puts = 0

    def put(self, value):
        self.puts += 1
        return value


def independent_walk(root: Path, hidden: set[str]) -> dict[str, str]:
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        folders = [str(Path(*rel.parts[: i + 1])) for i in range(len(rel.parts) - 1)]
        if any(p in SKIPPED_DIRS for p in rel.parts[:-1]) or any(f in hidden for f in folders):
            continue
        if path.is_file() and not _under_symlinked_dir(root, rel):
            out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _under_symlinked_dir(root: Path, rel: Path) -> bool:
    return any((root / Path(*rel.parts[: i + 1])).is_symlink() for i in range(len(rel.parts) - 1))


def make_tree(root: Path) -> None:
    (root / "kernels" / "rmsnorm").mkdir(parents=True)
    (root / "kernels" / "rmsnorm" / "spec.py").write_text("SPEC = 1\n")
    (root / "kernels" / "rmsnorm" / "kernel.py").write_text("def f(): pass\n")
    (root / "notes.md").write_text("hello\n")
    (root / "tiny").mkdir()
    (root / "tiny" / "config.json").write_text("{}\n")
    for skipped in (".git", "kernels/__pycache__"):
        (root / skipped).mkdir(parents=True)
        (root / skipped / "junk").write_text("never sent\n")
    (root / ".infra-agent" / "artifacts").mkdir(parents=True)  # the server's state: hidden
    (root / ".infra-agent" / "ledger.sqlite").write_text("private\n")
    os.symlink(root / "notes.md", root / "link-to-notes.md")  # a file link: its target's bytes
    os.symlink(root / "tiny", root / "link-to-tiny")  # a folder link: not followed


def manifest_hashes(mirror: WorkspaceMirror, store: ObjectStore) -> tuple[str, dict[str, str]]:
    version = mirror.version(store)
    (manifest,) = version.manifest
    for rel, entry in manifest.items():  # the blob holds the bytes the hash names
        assert hashlib.sha256(entry.blob).hexdigest() == entry.sha256, rel
    return version.digest, {rel: e.sha256 for rel, e in manifest.items()}


def test_the_manifest_is_every_file_a_job_sees_by_its_hash(tmp_path):
    make_tree(tmp_path)
    mirror = WorkspaceMirror(tmp_path, (".infra-agent",))
    _, hashes = manifest_hashes(mirror, ObjectStore())
    assert hashes == independent_walk(tmp_path, {".infra-agent"})
    assert set(hashes) == {
        "kernels/rmsnorm/spec.py",
        "kernels/rmsnorm/kernel.py",
        "notes.md",
        "tiny/config.json",
        "link-to-notes.md",
    }


def test_a_new_version_exactly_when_what_a_job_reads_changes(tmp_path):
    make_tree(tmp_path)
    mirror, store = WorkspaceMirror(tmp_path, (".infra-agent",)), ObjectStore()
    first, _ = manifest_hashes(mirror, store)
    puts = store.puts
    assert manifest_hashes(mirror, store)[0] == first and store.puts == puts  # nothing re-read

    spec = tmp_path / "kernels" / "rmsnorm" / "spec.py"
    later = time.time_ns() + 10_000_000
    os.utime(spec, ns=(later, later))  # touched, same bytes: re-read, the same version
    assert manifest_hashes(mirror, store)[0] == first and store.puts == puts + 1

    spec.write_text("SPEC = 2\n")  # an edit
    edited, hashes = manifest_hashes(mirror, store)
    assert edited != first and hashes == independent_walk(tmp_path, {".infra-agent"})

    (tmp_path / "notes.md").unlink()  # a removal (the link to it now dangles: gone too)
    removed, hashes = manifest_hashes(mirror, store)
    assert removed != edited and "notes.md" not in hashes and "link-to-notes.md" not in hashes

    (tmp_path / "tiny" / "config.json").chmod(0o755)  # made executable: a job sees the mode
    chmodded = manifest_hashes(mirror, store)[0]
    assert chmodded != removed

    (tmp_path / ".infra-agent" / "ledger.sqlite").write_text("changed\n")  # hidden: no change
    (tmp_path / ".git" / "junk").write_text("changed\n")
    assert manifest_hashes(mirror, store)[0] == chmodded
