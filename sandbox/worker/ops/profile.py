"""Run a kernel call or a workload under torch.profiler and the range recorder; return raw events.

Payload::

    {"code": {"entry", "path" | "source"},
     "target": "kernel" | "workload",
     "kernel": {"args": [Arg dicts], "shape": {...}, "dtype": "float32", "seed": 1, "calls": 20,
                "make_inputs": {"entry", "path"} | None},          # target "kernel" only
     "workload_args": [JSON values],                               # target "workload" only
     "attach_wait_s": 0.5,   # after announcing our pid, before the window: the host attaches its samplers
     "max_ops": 400, "max_events": 20000, "max_ranges": 100000}

The window runs with torch.profiler on CPU (and CUDA when present), shapes recorded, and
``profile_all_threads``: torch 2.13 records only the thread that started the profiler
unless that flag is set (tests/tools/profile/test_torch_threads.py shows both).
Returns, as raw data for the judge: the window (perf_counter ns), op rows grouped by
name and input shapes, CPU op and user-annotation events with system thread ids, the
range helper's ranges (columnar), GPU kernel rows when CUDA ran, per-thread names and
on-CPU times seen from inside, threads still alive and child processes left when the
entry returned. A workload that forks: the child leaves at once (os._exit), the parent
reports the children so the judge can refuse the measurement.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import torch

from .. import ranges
from ..context import JobContext
from ..loader import load_entry
from ..tensors import make_inputs
from .reference import generate

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def run(payload: dict, ctx: JobContext) -> dict:
    code = payload["code"]
    fn = load_entry(ctx, entry=code["entry"], source=code.get("source"), path=code.get("path"))
    call = _kernel_call(fn, payload["kernel"], ctx) if payload["target"] == "kernel" else \
        _workload_call(fn, payload.get("workload_args") or [])
    my_pid = os.getpid()
    watcher = ThreadWatcher()
    ctx.progress(0, None, f"profile:attach pid={my_pid}")
    time.sleep(float(payload.get("attach_wait_s", 0.0)))

    offset_ns = time.time_ns() - time.perf_counter_ns()  # epoch -> perf_counter, for the torch trace
    watcher.start()
    ranges.start()
    with _profiler(ctx.device) as prof:
        start_ns = time.perf_counter_ns()
        call()
        if os.getpid() != my_pid:  # a fork of the workload returned here: it must not touch our result
            os._exit(0)
        end_ns = time.perf_counter_ns()
    recorded = ranges.stop()
    watcher.stop()
    children = _children()
    alive = [{"tid": t.native_id, "name": t.name} for t in threading.enumerate()
             if t is not threading.current_thread() and t is not watcher.thread and t.native_id is not None]

    trace_file = ctx.job_dir / "tmp" / "torch_trace.json"
    prof.export_chrome_trace(str(trace_file))
    events = _trace_events(trace_file, offset_ns, payload.get("max_events", 20000))
    trace_file.unlink(missing_ok=True)
    return {
        "pid": my_pid, "main_tid": threading.get_native_id(), "window": {"start_ns": start_ns, "end_ns": end_ns},
        "ops": _op_rows(prof, payload.get("max_ops", 400)), **events,
        "ranges": _columns(recorded["ranges"], payload.get("max_ranges", 100_000)),
        "ranges_dropped": recorded["dropped"], "unfinished_ranges": recorded["unfinished"][:100],
        "threads": watcher.threads, "alive_after_return": alive, "children": children,
        "device": ctx.device, "cuda_activities": ctx.device == "cuda",
    }


def _kernel_call(fn, spec: dict, ctx: JobContext):
    custom = spec.get("make_inputs")
    generator_fn = load_entry(ctx, entry=custom["entry"], path=custom.get("path"), module_name="spec_inputs") \
        if custom else None
    item = {"shape": spec["shape"], "dtype": spec["dtype"], "seed": spec["seed"]}
    inputs = generate(item, spec["args"], generator_fn, ctx.device) if generator_fn else \
        make_inputs(spec["args"], spec["shape"], spec["dtype"], spec["seed"], device=ctx.device)
    fn(*inputs)  # warm-up outside the window: compilation and first-touch allocation are not the steady state
    _sync(ctx.device)
    calls = int(spec.get("calls", 10))

    def call() -> None:
        for _ in range(calls):
            with ranges.span("call"):
                fn(*inputs)
                _sync(ctx.device)

    return call


def _workload_call(fn, args: list):
    def call() -> None:
        fn(*args)

    return call


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _profiler(device: str):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    config = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    return torch.profiler.profile(activities=activities, record_shapes=True, experimental_config=config)


def _op_rows(prof, max_ops: int) -> list[dict]:
    """One row per (op name, input shapes): count, self and total CPU time (µs)."""
    rows = []
    for avg in prof.key_averages(group_by_input_shape=True):
        if avg.device_type != torch.autograd.DeviceType.CPU:
            continue
        rows.append({"name": avg.key, "input_shapes": str(avg.input_shapes), "count": avg.count,
                     "self_us": avg.self_cpu_time_total, "total_us": avg.cpu_time_total})
    by_self = sorted(rows, key=lambda r: -r["self_us"])[:max_ops]
    by_total = sorted(rows, key=lambda r: -r["total_us"])[:max_ops]
    keep = {id(r): r for r in by_self + by_total}
    return list(keep.values())


def _trace_events(trace_file: Path, offset_ns: int, max_events: int) -> dict:
    """CPU ops and record_function ranges with system thread ids, in perf_counter ns; GPU kernel rows."""
    trace = json.loads(trace_file.read_text())
    base = int(trace.get("baseTimeNanoseconds", 0))
    annotations, ops, kernels = [], [], {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        cat, start = e.get("cat"), int(float(e["ts"]) * 1000) + base - offset_ns
        item = {"name": e.get("name", ""), "tid": e.get("tid"), "start_ns": start,
                "end_ns": start + int(float(e.get("dur", 0)) * 1000)}
        if cat == "user_annotation":
            annotations.append(item)
        elif cat == "cpu_op":
            ops.append(item)
        elif cat == "kernel":
            row = kernels.setdefault(item["name"], {"name": item["name"], "count": 0, "total_us": 0.0})
            row["count"] += 1
            row["total_us"] += float(e.get("dur", 0))
    ops.sort(key=lambda o: o["start_ns"])
    return {"torch_ranges": annotations[:max_events], "op_events": ops[:max_events], "op_events_total": len(ops),
            "gpu_kernels": sorted(kernels.values(), key=lambda k: -k["total_us"])[:200]}


def _columns(rows: list[dict], limit: int) -> dict:
    names = sorted({r["name"] for r in rows})
    index = {n: i for i, n in enumerate(names)}
    kept = rows[:limit]
    return {"names": names, "name": [index[r["name"]] for r in kept], "tid": [r["tid"] for r in kept],
            "thread": [r["thread"] for r in kept], "start_ns": [r["start_ns"] for r in kept],
            "end_ns": [r["end_ns"] for r in kept], "cpu_ns": [r["cpu_ns"] for r in kept],
            "truncated": max(0, len(rows) - limit)}


def _children() -> list[int]:
    pids = []
    for task in Path("/proc/self/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return pids


class ThreadWatcher:
    """Names and on-CPU times (/proc/self/task, first and last seen) of this process's threads,
    polled every 20 ms, so threads that end before the window does still appear; a thread too
    short-lived for a poll still gives its name to a one-shot threading.setprofile hook."""

    def __init__(self) -> None:
        self.threads: dict[str, dict] = {}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="profile-watcher", daemon=True)

    def start(self) -> None:
        threading.setprofile(self._name_hook)  # threads started from now on announce themselves once
        self.thread.start()

    def stop(self) -> None:
        threading.setprofile(None)
        self._stop.set()
        self.thread.join()
        self._poll()

    def _name_hook(self, frame, event, arg) -> None:
        sys.setprofile(None)  # once per thread: its first event
        me = threading.current_thread()
        self.threads.setdefault(str(me.native_id), {"name": me.name})

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            self._poll()

    def _poll(self) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        for task in Path("/proc/self/task").iterdir():
            tid = int(task.name)
            if tid == self.thread.native_id:
                continue
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            cpu_ns = (int(fields[11]) + int(fields[12])) * 1_000_000_000 // CLOCK_TICKS
            entry = self.threads.setdefault(str(tid), {"name": names.get(tid, "")})
            entry.setdefault("cpu_first_ns", cpu_ns)
            entry["cpu_ns"] = cpu_ns
            if names.get(tid):
                entry["name"] = names[tid]
