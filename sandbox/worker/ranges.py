"""Named time ranges, per thread: the stdlib-only helper that workloads and the engine import.

    from ia_worker.ranges import span            # inside a sandbox job (the worker package)

    with span("kv_transfer"):                     # or @span("dispatch") on a function
        copy_blocks()

Each finished range records its name, the thread (native id and name), its wall-clock
start and end (``time.perf_counter_ns``: CLOCK_MONOTONIC, the same clock the host's
samplers read, so the judge can line samples up with ranges) and the thread's on-CPU
time at both ends (``time.thread_time_ns``). Nothing is recorded unless a recorder is
active (``start``/``stop``, done by the profile op), so a span in an engine's hot path
costs one attribute check when nobody profiles.

It lives in the worker package because that package is on every sandboxed job's path
(as ``ia_worker``) and imports nothing heavy; on the host it is
``infra_agent.sandbox.worker.ranges``. Records are raw data for the judge, never a verdict.
"""

from __future__ import annotations

import threading
import time

MAX_RANGES = 200_000  # per recording; more are counted, not kept (a tight loop must not eat the job's memory)


class _Recorder:
    def __init__(self) -> None:
        self.active = False
        self.ranges: list[tuple] = []
        self.dropped = 0
        self.open: dict[int, list] = {}  # thread id -> stack of (name, start_ns, cpu_start_ns)


_recorder = _Recorder()


def start() -> None:
    """Begin a recording (clears the previous one)."""
    _recorder.ranges, _recorder.dropped, _recorder.open = [], 0, {}
    _recorder.active = True


def stop() -> dict:
    """End the recording; returns {"ranges": [...], "dropped": n, "unfinished": [...]} as JSON data."""
    _recorder.active = False
    now = time.perf_counter_ns()
    unfinished = [
        {"name": name, "tid": tid, "start_ns": start_ns, "seen_open_at_ns": now}
        for tid, stack in list(_recorder.open.items())
        for name, start_ns, _ in stack
    ]
    keys = ("name", "tid", "thread", "start_ns", "end_ns", "cpu_ns")
    return {
        "ranges": [dict(zip(keys, r, strict=True)) for r in _recorder.ranges],
        "dropped": _recorder.dropped,
        "unfinished": unfinished,
    }


class span:
    """A named range: a context manager, or a decorator for a whole function."""

    __slots__ = ("name", "_start_ns", "_cpu_ns")

    def __init__(self, name: str) -> None:
        self.name = str(name)

    def __enter__(self) -> span:
        if _recorder.active:
            tid = threading.get_native_id()
            self._cpu_ns = time.thread_time_ns()
            self._start_ns = time.perf_counter_ns()
            _recorder.open.setdefault(tid, []).append((self.name, self._start_ns, self._cpu_ns))
        else:
            self._start_ns = None
        return self

    def __exit__(self, *exc) -> None:
        if self._start_ns is None:
            return
        end_ns = time.perf_counter_ns()  # first: whatever follows is not the range's own time
        cpu_ns = time.thread_time_ns() - self._cpu_ns
        tid = threading.get_native_id()
        stack = _recorder.open.get(tid)
        if stack:
            stack.pop()
        if not _recorder.active:
            return
        if len(_recorder.ranges) >= MAX_RANGES:
            _recorder.dropped += 1
            return
        _recorder.ranges.append(
            (self.name, tid, threading.current_thread().name, self._start_ns, end_ns, cpu_ns)
        )

    def __call__(self, fn):
        name = self.name

        def wrapper(*args, **kwargs):
            with span(name):
                return fn(*args, **kwargs)

        wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = (
            fn.__name__,
            fn.__qualname__,
            fn.__doc__,
        )
        return wrapper
