"""A first-come-first-served pool of N job slots that says where a waiting job stands."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

from .streams import Progress, report


class Slots:
    def __init__(self, size: int):
        self.size = max(1, size)
        self._free = list(range(self.size))  # slot indices: a timing job's GPU
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
