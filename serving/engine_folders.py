"""Engine folders on the host: a disk cap while an engine runs, and removal once it is gone.

Each engine writes only to its own folder (<state>/jobs/engine-<handle>: logs, caches, the
profiles it records), like a job; jobs are capped at `Limits.disk_bytes` and pruned, and so
are engines: `DiskCap` stops an engine whose folder grows past the cap (checked every few
seconds, as a job's is), `Engines.stop` removes the folder, and `sweep_stale` removes the
folders a previous server left (its engines died with it: bwrap's --die-with-parent).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from ..sandbox.streams import DiskWatch

PREFIX = "engine-"
OWNER_FILE = "owner.pid"  # the server process that started the engine
CHECK_EVERY_S = 2.0


def claim(folder: Path) -> None:
    (folder / OWNER_FILE).write_text(str(os.getpid()))


def sweep_stale(jobs_dir: Path) -> int:
    """Remove engine folders whose server is gone (another live server's are kept); how many."""
    removed = 0
    for folder in jobs_dir.glob(PREFIX + "*"):
        try:
            owner = int((folder / OWNER_FILE).read_text())
        except (OSError, ValueError):
            owner = None
        if owner is not None and owner != os.getpid() and _alive(owner):
            continue
        if owner == os.getpid():
            continue  # ours: removed at stop
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DiskCap:
    """Watch one engine's folder; `exceeded` holds (bytes, files) once it outgrew the cap."""

    def __init__(self, folder: Path, cap_bytes: int, max_files: int):
        self.folder, self.cap_bytes, self.max_files = folder, cap_bytes, max_files
        self.exceeded: tuple[int, int] | None = None
        self._task: asyncio.Task | None = None

    def start(self, on_exceeded) -> None:
        """Poll until the cap trips (then await `on_exceeded()`) or `cancel` is called."""
        self._task = asyncio.create_task(self._watch(on_exceeded))

    async def _watch(self, on_exceeded) -> None:
        watch = DiskWatch(self.folder, self.cap_bytes, self.max_files, every_s=CHECK_EVERY_S)
        while not watch.exceeded.done():
            await watch.poll()
            await asyncio.sleep(CHECK_EVERY_S)
        self.exceeded = (watch.num_bytes, watch.num_files)
        await on_exceeded()

    def cancel(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    def describe(self) -> str:
        num_bytes, num_files = self.exceeded or (0, 0)
        return (f"stopped for exceeding its disk cap: {num_bytes} bytes in {num_files} files in its folder "
                f"(at most {self.cap_bytes} bytes, {self.max_files} files)")
