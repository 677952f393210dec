"""Triton's compiled kernels, shared among the jobs that run the same code, never across trust.

Every job starts with an empty Triton cache in its own folder, so no job can plant compiled
code for the next. On a GPU that makes each of a call's jobs JIT-compile the same candidate
again (0.6-2.2 s per kernel here). A job may name a cache group (`Job.triton_cache`): before
it starts, the group's entries are copied into its own cache folder; after it ends, the
entries it created are copied back. The job itself still writes only its own folder.

The tools choose the groups: one per (call, code under test), so a candidate's compiled
kernels reach only that candidate's later jobs in the same call, never the reference's jobs
or another call's. `TRUSTED_ZOO` holds kernels compiled by jobs that ran nothing but the
built-in zoo's own code; it persists across calls, and no other group's job writes to it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import uuid
from pathlib import Path

TRUSTED_ZOO = "trusted:zoo"
KEEP_GROUPS = 32  # per-call groups kept (newest first); the trusted group is never pruned
MAX_ENTRY_BYTES = 64 << 20  # a cache entry larger than this is not kept (a kernel is ~100 KB)


def group_dir(root: Path, group: str) -> Path:
    return root / hashlib.sha256(group.encode()).hexdigest()[:24]


def seed(root: Path, group: str, job_cache: Path) -> set[str]:
    """Copy the group's entries into a job's (empty) Triton cache folder; their names."""
    source = group_dir(root, group)
    seeded: set[str] = set()
    if not source.is_dir():
        return seeded
    job_cache.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.is_dir() and not entry.is_symlink() and not entry.name.startswith("."):
            shutil.copytree(entry, job_cache / entry.name, dirs_exist_ok=True)
            seeded.add(entry.name)
    return seeded


def keep(root: Path, group: str, job_cache: Path, seeded: set[str]) -> int:
    """Copy the entries a finished job created back into its group; returns how many it created
    (Triton writes one entry per compiled kernel or launcher). What the job wrote is untrusted:
    only folders of plain files under the size cap are kept."""
    if not job_cache.is_dir():
        return 0
    created = [
        e for e in job_cache.iterdir() if e.name not in seeded and not e.name.startswith(".")
    ]
    target = group_dir(root, group)
    target.mkdir(parents=True, exist_ok=True)
    for entry in created:
        files = _plain_files(entry)
        if files is not None and not (target / entry.name).exists():
            _copy_in(entry, files, target)
    os.utime(target)  # newest groups survive pruning
    prune(root)
    return len(created)


def prune(root: Path, keep_groups: int = KEEP_GROUPS) -> None:
    trusted = group_dir(root, TRUSTED_ZOO)
    groups = sorted(
        (d for d in root.iterdir() if d.is_dir() and d != trusted), key=lambda d: d.stat().st_mtime
    )
    for old in groups[:-keep_groups]:
        shutil.rmtree(old, ignore_errors=True)


def _plain_files(entry: Path) -> list[Path] | None:
    """The entry's files if it is a folder of regular, singly linked files under the cap, else None."""
    info = entry.lstat()
    if not stat.S_ISDIR(info.st_mode):
        return None
    files, total = [], 0
    for folder, dirs, names in os.walk(entry, followlinks=False):
        for name in dirs + names:
            sub = (Path(folder) / name).lstat()
            if stat.S_ISDIR(sub.st_mode):
                continue
            if not stat.S_ISREG(sub.st_mode) or sub.st_nlink != 1:  # a link could alias a host file
                return None
            total += sub.st_size
            files.append(Path(folder) / name)
    return files if total <= MAX_ENTRY_BYTES else None


def _copy_in(entry: Path, files: list[Path], target: Path) -> None:
    staging = target / f".{entry.name}.{uuid.uuid4().hex[:8]}"
    for file in files:
        dest = staging / file.relative_to(entry)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, dest, follow_symlinks=False)
    try:
        os.rename(staging, target / entry.name)  # atomic; a concurrent job may have kept it first
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
