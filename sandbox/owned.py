"""Folders named for the server process that made them, removed once that process is gone.

    folder = make_owned("check-numerics-", parent)  # parent/check-numerics-<pid>-<random>/
    ...
    sweep_dead_owners("check-numerics-", parent)      # the folders of pids no longer alive

A server removes what it made when the work ends; one that dies first (SIGKILLed, a killed
cluster node, an IDE that kills its MCP server) cannot, so the next one to look removes the
folders whose pid is no longer a live process. A live server's folders are never touched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def make_owned(prefix: str, parent: Path | None = None) -> Path:
    """A new folder `<prefix><this pid>-<random>` in `parent` (the temp folder when None)."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))


def sweep_dead_owners(prefix: str, parent: Path | None = None) -> int:
    """Remove the folders make_owned(prefix, parent) made for processes no longer alive; how
    many."""
    removed = 0
    root = parent if parent is not None else Path(tempfile.gettempdir())
    for folder in root.glob(f"{prefix}*-*"):
        pid = folder.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
