"""What flows out of a running job: its stdout/stderr (capped) and its progress lines."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import Awaitable, Callable

Progress = Callable[[float, "float | None", str], Awaitable[None]]


async def report(progress: Progress | None, done: float, total: float | None, message: str) -> None:
    """Progress is advisory: a callback that fails (a client gone away) must not fail the job."""
    if progress is None:
        return
    try:
        await progress(done, total, message)
    except Exception:  # noqa: BLE001
        pass


class Capture:
    """Reads one pipe as the job writes it; keeps the tail; trips `exceeded` past the cap.

    Past the cap it stops reading, so the job blocks on its next write until it is killed.
    """

    def __init__(self, fd: int, cap_bytes: int, tail_bytes: int):
        self.fd = fd
        self.cap_bytes = cap_bytes
        self.tail_bytes = tail_bytes
        self.num_bytes = 0
        self._tail = bytearray()
        self._loop = asyncio.get_running_loop()
        self.exceeded: asyncio.Future = self._loop.create_future()
        self.eof: asyncio.Future = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._stop()
            return
        self.num_bytes += len(chunk)
        self._tail += chunk
        del self._tail[: max(0, len(self._tail) - self.tail_bytes)]
        if self.num_bytes > self.cap_bytes:
            self._stop()
            if not self.exceeded.done():
                self.exceeded.set_result(self.num_bytes)

    def _stop(self) -> None:
        self._loop.remove_reader(self.fd)
        if not self.eof.done():
            self.eof.set_result(None)

    async def finish(self, timeout_s: float = 2.0) -> None:
        """Drain until EOF (all writers gone) or the timeout, then close the pipe."""
        try:
            await asyncio.wait_for(asyncio.shield(self.eof), timeout_s)
        except asyncio.TimeoutError:
            self._stop()
        os.close(self.fd)

    def tail(self) -> str:
        return self._tail.decode(errors="replace")


class ProgressTail:
    """Follows <job>/progress.jsonl (written by JobContext.progress) and forwards the newest line.

    The file is the job's: opened without following links, only if regular, read in
    bounded chunks; malformed lines are skipped.
    """

    MAX_READ = 1 << 16
    MAX_MESSAGE = 200

    def __init__(self, path: Path, progress: Progress | None):
        self.path = path
        self.progress = progress
        self.offset = 0
        self.last: tuple | None = None

    async def poll(self) -> None:
        if self.progress is None:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            os.lseek(fd, self.offset, os.SEEK_SET)
            data = os.read(fd, self.MAX_READ)
        finally:
            os.close(fd)
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        newest = None
        for line in complete.splitlines():
            try:
                item = json.loads(line)
                newest = (
                    float(item["done"]),
                    None if item.get("total") is None else float(item["total"]),
                    str(item.get("message", ""))[: self.MAX_MESSAGE],
                )
            except (ValueError, KeyError, TypeError, RecursionError):
                continue
        if newest is not None and newest != self.last:
            self.last = newest
            await report(self.progress, *newest)


class DiskWatch:
    """Every few seconds, how much the job has written to its folder; trips `exceeded` past the cap.

    RLIMIT_FSIZE caps one file; this caps them all (and their number), so a job cannot
    fill the disk with many files under the per-file limit.
    """

    def __init__(self, folder: Path, cap_bytes: int, max_files: int, every_s: float = 1.0):
        self.folder = folder
        self.cap_bytes = cap_bytes
        self.max_files = max_files
        self.every_s = every_s
        self._next = 0.0
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.exceeded: asyncio.Future = loop.create_future()
        self.num_bytes = self.num_files = 0

    async def poll(self) -> None:
        if self.exceeded.done() or self._loop.time() < self._next:
            return
        self.num_bytes, self.num_files = await asyncio.to_thread(self._measure)
        self._next = self._loop.time() + self.every_s
        if (
            self.num_bytes > self.cap_bytes or self.num_files > self.max_files
        ) and not self.exceeded.done():
            self.exceeded.set_result(self.num_bytes)

    def _measure(self) -> tuple[int, int]:
        num_bytes = num_files = 0
        for folder, dirs, files in os.walk(self.folder, followlinks=False):
            for name in dirs + files:
                try:
                    num_bytes += os.lstat(os.path.join(folder, name)).st_blocks * 512
                except OSError:
                    pass
                num_files += 1
                if num_files > self.max_files:
                    return num_bytes, num_files
        return num_bytes, num_files
