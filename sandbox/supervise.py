"""Watch one running job: a wall-clock timeout, output and disk caps, progress; kill what
is left in its cgroup; then judge what it left (outcome.py) into a JobResult.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from . import outcome
from .child import Child, wait_done
from .job import Job, JobResult
from .launcher import ZygoteDied
from .policy import Limits
from .streams import Capture, DiskWatch, ProgressTail

Progress = Callable[[float, "float | None", str], Awaitable[None]]


async def supervise(child: Child, job: Job, limits: Limits, progress: Progress | None) -> JobResult:
    host_dir = child.host_dir
    stdout = Capture(child.out_r, limits.output_bytes, limits.tail_bytes)
    stderr = Capture(child.err_r, limits.output_bytes, limits.tail_bytes)
    child.out_r = child.err_r = -1  # the captures own and close them now
    ending = outcome.Ending(
        wait_status=None,
        timeout_s=job.timeout_s,
        output_cap_bytes=limits.output_bytes,
        memory_limit_bytes=limits.memory_bytes,
        num_processes=limits.num_processes,
    )
    tail = ProgressTail(host_dir / "progress.jsonl", progress)
    disk = DiskWatch(host_dir, limits.disk_bytes, limits.max_files)
    ending.disk_cap = (limits.disk_bytes, limits.max_files)
    started = time.monotonic()
    try:
        done = asyncio.ensure_future(wait_done(child.sock))
        watchers = [done, child.exited, stdout.exceeded, stderr.exceeded, disk.exceeded]
        finished, _ = await wait_first(watchers, job.timeout_s, [tail.poll, disk.poll])
        ending.done = done in finished and done.result()
        ending.timed_out = not finished
        if stdout.exceeded in finished or stderr.exceeded in finished:
            ending.output_exceeded = "stdout" if stdout.exceeded in finished else "stderr"
        if disk.exceeded in finished:
            ending.disk_exceeded = (disk.num_bytes, disk.num_files)
        if ending.timed_out or ending.output_exceeded or ending.disk_exceeded:
            await child.kill()
        elif not ending.done or child.cgroup is None:
            try:  # the wait status says how it ended (without cgroups it is also how we know it ended)
                ending.wait_status = (await asyncio.wait_for(child.exited, 10.0))["status"]
            except (ZygoteDied, asyncio.TimeoutError):
                pass
        done.cancel()
    finally:
        wall_s = time.monotonic() - started
        if child.cgroup is not None or not (ending.done or ending.wait_status is not None):
            await (
                child.kill()
            )  # what is left (daemons, stray threads), or all of it if we were cancelled
        if child.cgroup is not None:
            ending.oom_kills, ending.pids_limit_hits = (
                child.cgroup.oom_kills(),
                child.cgroup.pids_limit_hits(),
            )
        await stdout.finish()
        await stderr.finish()
        await tail.poll()
    removed = outcome.sanitize_tree(host_dir / "out")
    status, result, error = outcome.judge(ending, host_dir)
    if removed:
        error = (
            error + "\n" if error else ""
        ) + f"removed from out/ (not plain files): {', '.join(removed[:10])}"
    return JobResult(
        status=status,
        result=result,
        out_dir=host_dir / "out",
        error=error,
        stdout_tail=stdout.tail(),
        stderr_tail=stderr.tail(),
        wall_s=wall_s,
    )


async def wait_first(futures: list, timeout_s: float, pollers: list) -> tuple[set, set]:
    """Wait for the first future to finish (or the timeout), running the pollers meanwhile."""
    deadline = time.monotonic() + timeout_s
    pending = set(futures)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return set(), pending
        done, pending = await asyncio.wait(
            pending, timeout=min(left, 0.25), return_when=asyncio.FIRST_COMPLETED
        )
        if done:
            return done, pending
        for poll in pollers:
            await poll()
