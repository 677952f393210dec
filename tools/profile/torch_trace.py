"""An engine's torch.profiler traces (Chrome JSON, maybe gzipped) read into profile's raw window.

vLLM writes one trace per process (API server, engine core, each worker). From each we keep the
ops (`cat` cpu_op and the record_function ranges, `user_annotation`: aggregated by name into
count, total and self time, self = total less the ops nested inside it on the same thread: the
table torch's key_averages prints, which vLLM writes beside it as rank0.profiler_out.txt) and the
record_function ranges per thread, on CLOCK_MONOTONIC. The files are untrusted: size-capped,
gzip read with a cap on what it inflates to, every field checked before use.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...sandbox.worker.shared import nested_self_times
from ..base import AgentError

OP_CATEGORIES = ("cpu_op",)
RANGE_CATEGORIES = ("user_annotation", "gpu_user_annotation")
MAX_RANGES = 20_000  # record_function ranges kept for the thread table and the Perfetto trace


@dataclass
class Trace:
    path: Path
    ops: list[tuple[str, int, int, float, float]]  # (name, pid, tid, start us, duration us)
    ranges: list[tuple[str, int, int, float, float]]  # the same, for record_function ranges
    threads: dict[int, str] = field(default_factory=dict)  # tid -> thread name
    base_ns: int = 0  # Unix ns the events' ts (µs) count from (kineto's baseTimeNanoseconds)


def complete(path: Path) -> bool:
    """Whether the file reads whole (a gzip stream its writer has finished)."""
    try:
        with _open(path) as f:
            while f.read(1 << 20):
                pass
        return True
    except (OSError, EOFError, gzip.BadGzipFile):
        return False


def _open(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")


def read(path: Path, max_bytes: int) -> Trace:
    if path.stat().st_size > max_bytes:
        raise AgentError(
            f"the engine's trace {path.name} is {path.stat().st_size} bytes (cap {max_bytes}): "
            "profile a shorter duration_s or a lower load_concurrency"
        )
    with _open(path) as f:
        data = f.read(max_bytes + 1)  # the cap holds for what the gzip inflates to as well
    if len(data) > max_bytes:
        raise AgentError(
            f"the engine's trace {path.name} inflates past {max_bytes} bytes: profile a shorter "
            "duration_s or a lower load_concurrency"
        )
    try:
        doc = json.loads(data)
    except ValueError:
        raise AgentError(f"the engine's trace {path.name} is not JSON") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise AgentError(f"the engine's trace {path.name} has no traceEvents")
    base = doc.get("baseTimeNanoseconds")
    trace = Trace(path, [], [], base_ns=base if isinstance(base, int) else 0)
    for e in events:
        if not isinstance(e, dict):
            continue
        tid = e.get("tid")
        if e.get("ph") == "M" and e.get("name") == "thread_name" and isinstance(tid, int):
            name = (e.get("args") or {}).get("name")
            if isinstance(name, str):  # kineto's "thread 37 (VLLM::Worker)": the name inside
                match = re.fullmatch(r"thread \d+ \((.*)\)", name)
                trace.threads[tid] = (match.group(1) if match else name)[:100]
            continue
        if e.get("ph") != "X" or not isinstance(tid, int):
            continue
        ts, dur, name, pid = e.get("ts"), e.get("dur"), e.get("name"), e.get("pid")
        if not (_num(ts) and _num(dur) and isinstance(name, str)):
            continue
        row = (name[:200], pid if isinstance(pid, int) else 0, tid, float(ts), float(dur))
        if e.get("cat") in OP_CATEGORIES + RANGE_CATEGORIES:
            trace.ops.append(row)  # a record_function range is an op of torch's table too
        if e.get("cat") in RANGE_CATEGORIES and len(trace.ranges) < MAX_RANGES:
            trace.ranges.append(row)
    return trace


def _num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def window(traces: list[Trace], window: tuple[int, int]) -> dict:
    """The raw window (the profile job's format) from all traces: ops aggregated over every
    process, record_function ranges on CLOCK_MONOTONIC, thread names."""
    unix_minus_mono = time.time_ns() - time.monotonic_ns()
    ops: dict[str, dict] = {}
    ranges, threads = [], {}
    for trace in traces:
        for name, self_us, total_us in _self_times(trace.ops):
            row = ops.setdefault(name, {"name": name, "input_shapes": "", "count": 0})
            row["count"] += 1
            row["self_us"] = row.get("self_us", 0.0) + self_us
            row["total_us"] = row.get("total_us", 0.0) + total_us
        for name, _, tid, ts, dur in trace.ranges:
            start = trace.base_ns + int(ts * 1e3) - unix_minus_mono
            ranges.append(
                {"name": name, "tid": tid, "start_ns": start, "end_ns": start + int(dur * 1e3)}
            )
        threads.update({str(tid): {"name": name} for tid, name in trace.threads.items()})
    return {
        "window": {"start_ns": window[0], "end_ns": window[1]},
        "ranges": {},
        "torch_ranges": ranges,
        "ops": list(ops.values()),
        "threads": threads,
        "traces": [p.path.name for p in traces],
    }


def _self_times(ops: list[tuple[str, int, int, float, float]]) -> list[tuple[str, float, float]]:
    """(name, self µs, total µs) per op of (name, pid, tid, start µs, duration µs)."""
    return nested_self_times(((pid, tid), ts, dur, name, name) for name, pid, tid, ts, dur in ops)
