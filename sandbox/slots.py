"""A first-come-first-served pool of N job slots that says where a waiting job stands, and the
GPUs of a multi-GPU host as locks a job is pinned by."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

from .streams import Progress, report


class Slots:
    def __init__(self, size: int):
        self.size = max(1, size)
        self._free = list(range(self.size))  # slot indices
        self._waiting: list[asyncio.Future] = []

    @property
    def num_running(self) -> int:
        return self.size - len(self._free)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @asynccontextmanager
    async def slot(self, progress: Progress | None = None) -> AsyncIterator[int]:
        index = await self._acquire(progress)
        try:
            yield index
        finally:
            self._release(index)

    async def _acquire(self, progress: Progress | None) -> int:
        if self._free and not self._waiting:
            return self._free.pop(0)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        reported = None
        try:
            while True:
                if progress is not None and future in self._waiting:
                    ahead = self._waiting.index(future)
                    if ahead != reported:
                        reported = ahead
                        await report(
                            progress,
                            0.0,
                            None,
                            f"queued: {ahead} ahead, {self.num_running} running",
                        )
                try:
                    return await asyncio.wait_for(asyncio.shield(future), 0.25)
                except asyncio.TimeoutError:
                    continue
        except BaseException:
            if future in self._waiting:
                self._waiting.remove(future)
            elif future.done() and not future.cancelled():
                self._release(future.result())  # handed a slot just as we were cancelled
            raise

    def _release(self, index: int) -> None:
        while self._waiting:
            future = self._waiting.pop(0)
            if not future.done():
                future.set_result(index)
                return
        self._free.append(index)
        self._free.sort()


class DeviceLocks:
    """The GPUs of a multi-GPU host: each job that runs code on a device is pinned to one. A
    timing job holds its GPU alone (nothing else runs there while it times); run jobs may
    share a GPU with each other, never with a timing job. Waiters are served as devices free
    up; a shared job takes the least used GPU, so N run jobs spread over N GPUs."""

    def __init__(self, num_devices: int):
        self.num_devices = num_devices
        self._shared = [0] * num_devices  # run jobs on each device
        self._exclusive = [False] * num_devices  # a timing job on it
        self._changed: asyncio.Condition | None = None

    @asynccontextmanager
    async def hold(self, exclusive: bool) -> AsyncIterator[int]:
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            while (index := self._pick(exclusive)) is None:
                await self._changed.wait()
            if exclusive:
                self._exclusive[index] = True
            else:
                self._shared[index] += 1
        try:
            yield index
        finally:
            if exclusive:
                self._exclusive[index] = False
            else:
                self._shared[index] -= 1
            async with self._changed:
                self._changed.notify_all()

    def _pick(self, exclusive: bool) -> int | None:
        free = [
            i
            for i in range(self.num_devices)
            if not self._exclusive[i] and (not exclusive or self._shared[i] == 0)
        ]
        if not free:
            return None
        return min(free, key=lambda i: (self._shared[i], i))
