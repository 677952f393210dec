"""Run a kernel call or a workload under torch.profiler and the range recorder; return raw events.

Payload::

    {"code": {"entry", "path" | "source"},
     "target": "kernel" | "workload",
     "kernel": {"args": [Arg dicts], "shape": {...}, "dtype": "float32", "seed": 1, "calls": 20,
                "make_inputs": {"entry", "path"} | None},          # target "kernel" only
     "workload_args": [JSON values],                               # target "workload" only
     "attach_wait_s": 0.5,   # after announcing our pid, before the window: the host attaches its samplers
     "max_ops": 400, "max_events": 20000, "max_ranges": 100000}

The window (recorder.py, shared with the built-in engine's /start_profile) runs
torch.profiler on every thread with shapes, the range recorder and a thread watcher.
Returns, as raw data for the judge: the window (perf_counter ns), op rows grouped by
name and input shapes, CPU op and user-annotation events with system thread ids, the
range helper's ranges (columnar), GPU kernel rows when CUDA ran, per-thread names and
on-CPU times seen from inside, threads still alive and child processes left when the
entry returned. A workload that forks: the child leaves at once (os._exit), the parent
reports the children so the judge can refuse the measurement.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import torch

from .. import ranges
from ..context import JobContext
from ..loader import load_entry
from ..recorder import Window
from ..tensors import make_inputs
from .reference import generate


def run(payload: dict, ctx: JobContext) -> dict:
    code = payload["code"]
    fn = load_entry(ctx, entry=code["entry"], source=code.get("source"), path=code.get("path"))
    call = (
        _kernel_call(fn, payload["kernel"], ctx)
        if payload["target"] == "kernel"
        else _workload_call(fn, payload.get("workload_args") or [])
    )
    my_pid = os.getpid()
    window = Window(
        ctx.device, {k: payload[k] for k in ("max_ops", "max_events", "max_ranges") if k in payload}
    )
    ctx.progress(0, None, f"profile:attach pid={my_pid}")
    time.sleep(float(payload.get("attach_wait_s", 0.0)))
    window.start()
    call()
    if os.getpid() != my_pid:  # a fork of the workload returned here: it must not touch our result
        os._exit(0)
    window.end()
    # The host stops py-spy on this message (it polls progress every 0.25 s): torch.profiler's
    # post-processing below holds the GIL for a while and is not the window's; the sleep does not.
    ctx.progress(0, None, "profile:window-end")
    time.sleep(float(payload.get("attach_wait_s", 0.0)))
    window.close()
    raw = window.export(ctx.job_dir / "tmp")
    alive = [
        {"tid": t.native_id, "name": t.name}
        for t in threading.enumerate()
        if t is not threading.current_thread()
        and t is not window.watcher.thread
        and t.native_id is not None
    ]
    return {**raw, "alive_after_return": alive, "children": _children()}


def _kernel_call(fn, spec: dict, ctx: JobContext):
    custom = spec.get("make_inputs")
    generator_fn = (
        load_entry(ctx, entry=custom["entry"], path=custom.get("path"), module_name="spec_inputs")
        if custom
        else None
    )
    item = {"shape": spec["shape"], "dtype": spec["dtype"], "seed": spec["seed"]}
    inputs = (
        generate(item, spec["args"], generator_fn, ctx.device)
        if generator_fn
        else make_inputs(
            spec["args"], spec["shape"], spec["dtype"], spec["seed"], device=ctx.device
        )
    )
    fn(
        *inputs
    )  # warm-up outside the window: compilation and first-touch allocation are not the steady state
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


def _children() -> list[int]:
    pids = []
    for task in Path("/proc/self/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return pids
