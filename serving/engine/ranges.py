"""Named ranges for the engine's phases (schedule, prefill, decode, dispatch, combine,
kv_transfer): each is a torch.profiler `record_function` and, while `start_recording()` is
on, also a span in an in-process log, exported as Chrome trace events with real thread names.

Why both: torch.profiler on this CPU build records only the thread that started it
(measured: a range in another Python thread, started before or during the profile, is
absent), while disaggregated mode runs its phases on three threads.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

from torch.profiler import record_function

_spans: list[tuple[str, int, str, float, float]] | None = None  # (name, tid, thread, start_us, end_us)
_lock = threading.Lock()


def start_recording() -> None:
    global _spans
    with _lock:
        _spans = []


def stop_recording() -> dict:
    """The spans since start_recording(), as a Chrome trace ({"traceEvents": [...]}, µs)."""
    global _spans
    with _lock:
        spans, _spans = _spans or [], None
    pid = os.getpid()
    events = [{"ph": "X", "name": n, "pid": pid, "tid": tid, "ts": t0, "dur": t1 - t0, "cat": "engine"}
              for n, tid, _, t0, t1 in spans]
    names = {tid: thread for _, tid, thread, _, _ in spans}
    events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}}
               for tid, thread in names.items()]
    return {"traceEvents": events}


@contextmanager
def named_range(name: str):
    with record_function(name):
        if _spans is None:
            yield
            return
        t0 = time.perf_counter_ns() / 1000
        try:
            yield
        finally:
            t1 = time.perf_counter_ns() / 1000
            thread = threading.current_thread()
            with _lock:
                if _spans is not None:
                    _spans.append((name, threading.get_native_id(), thread.name, t0, t1))
