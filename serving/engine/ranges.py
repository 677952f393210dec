"""Named ranges for the engine's phases (schedule, prefill, decode, postprocess, dispatch,
combine, kv_transfer), on whichever thread runs them.

Each is a torch.profiler `record_function` (torch records it on every thread when the
profiler runs with `profile_all_threads`, as the profiling window does) and a span of the
stdlib range helper, `sandbox/worker/ranges.py`, which carries the thread's name and its
on-CPU time and is what `profile` reads: one helper for workloads and the engine alike.
When nothing records, a range costs a `record_function` and one attribute check.
"""

from __future__ import annotations

from contextlib import contextmanager

from torch.profiler import record_function

from ...sandbox.worker.ranges import span


@contextmanager
def named_range(name: str):
    with record_function(name), span(name):
        yield
