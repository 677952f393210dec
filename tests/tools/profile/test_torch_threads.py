"""Does torch.profiler record ops run on threads other than the one that started it?

Disputed upstream (kineto#443: no; pytorch#159256: yes). Measured here, torch 2.13 CPU: by
default it records only the starting thread; with _ExperimentalConfig(profile_all_threads=True)
(what the profile op uses) it records the other thread's ops and record_function ranges too,
under that thread's system thread id in the exported trace.
"""

import json
import threading

import torch
from torch._C._profiler import _ExperimentalConfig


def _profile(all_threads: bool, tmp_path) -> tuple[set, set, int]:
    stop, seen = threading.Event(), {}

    def worker():
        seen["tid"] = threading.get_native_id()
        while not stop.is_set():
            with torch.profiler.record_function("worker_range"):
                torch.ones(8) + 1

    thread = threading.Thread(target=worker)
    config = _ExperimentalConfig(profile_all_threads=all_threads)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], experimental_config=config
    ) as p:
        thread.start()
        with torch.profiler.record_function("main_range"):
            torch.zeros(4) * 2
        while "tid" not in seen:
            stop.wait(0.01)
        stop.wait(0.05)  # the worker runs a few iterations under the profiler
        stop.set()
    thread.join()
    trace = tmp_path / f"trace_{all_threads}.json"
    p.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    ranges = {e["name"] for e in events if e.get("cat") == "user_annotation"}
    tids = {e["tid"] for e in events if e.get("name") == "worker_range"}
    return ranges, tids, seen["tid"]


def test_only_the_starting_thread_by_default_all_threads_with_profile_all_threads(tmp_path):
    ranges, _, _ = _profile(False, tmp_path)
    assert ranges == {"main_range"}
    ranges, tids, worker_tid = _profile(True, tmp_path)
    assert ranges == {"main_range", "worker_range"} and tids == {worker_tid}
