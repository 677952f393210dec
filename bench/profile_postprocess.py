"""What a profiling window costs after it closes: the op table counted by torch's key_averages
against recorder.op_rows's one pass over the exported trace, on the same window, in one run.

The window is a busy one: two threads calling small torch ops in a loop (a decode step of a tiny
model is that), `--seconds` long, recorded as the profile op and the built-in engine record it
(every thread, shapes recorded). Prints each step after the window ends: torch.profiler's stop,
the trace's export and parse (the events the judge reads, now with the op table), and torch's
key_averages over the same window (what the op table cost before); the ratio of the whole
post-processing before and after, and the process's peak memory after each.

    .venv/bin/python bench/profile_postprocess.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import threading
import time
from pathlib import Path

import torch

from infra_agent.sandbox.worker import recorder


def busy(stop: threading.Event) -> None:
    x, w = torch.randn(4, 64), torch.randn(64, 64)
    while not stop.is_set():
        torch.nn.functional.silu(x @ w).softmax(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="the window's length")
    args = parser.parse_args()
    stop = threading.Event()
    window = recorder.Window("cpu")
    window.start()
    threads = [threading.Thread(target=busy, args=(stop,)) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    t0 = time.perf_counter()
    window.close()
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        raw = window.export(Path(scratch))
    t2 = time.perf_counter()
    peak_now = _peak_gib()
    torch_rows = [
        a
        for a in window.prof.key_averages(group_by_input_shape=True)
        if a.device_type == torch.autograd.DeviceType.CPU
    ]
    t3 = time.perf_counter()
    peak_before = _peak_gib()
    stop_s, export_s, torch_s = t1 - t0, t2 - t1, t3 - t2
    print(
        f"{args.seconds:g} s window, 2 busy threads, {raw['op_events_total']} op events; "
        f"{os.cpu_count()} cores, 1-min load {os.getloadavg()[0]:.1f}"
    )
    print(f"  torch.profiler stop                          {stop_s:7.1f} s")
    print(f"  export + parse + op table (one pass, now)    {export_s:7.1f} s")
    print(f"  key_averages's op table (before, extra)      {torch_s:7.1f} s")
    before, after = stop_s + export_s + torch_s, stop_s + export_s
    print(
        f"post-processing: before {before:.1f} s, now {after:.1f} s: {before / after:.2f}x less "
        f"({len(raw['ops'])} of {len(torch_rows)} op rows kept)"
    )
    print(f"peak resident memory: {peak_now:.2f} GiB now, {peak_before:.2f} GiB with key_averages")


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is in KiB


if __name__ == "__main__":
    main()
