"""The load generator's own CPU wait (serve_benchmark's client_starved finding) is the kernel's
account of its thread, checked against a second way of getting it: a thread that never sleeps
is always runnable, so wall time = time running (its CPU clock) + time waiting for a CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from infra_agent.serving.loadgen.runner import cpu_wait_s

HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass\n"


@pytest.mark.skipif(cpu_wait_s() is None, reason="this kernel keeps no schedstat")
def test_cpu_wait_is_wall_time_minus_cpu_time_of_a_busy_thread_sharing_its_core():
    core = min(os.sched_getaffinity(0))
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(core)])
    result: dict[str, float] = {}

    def busy() -> None:
        os.sched_setaffinity(0, {core})  # this thread only, beside the hog
        time.sleep(0.2)  # the hog is running
        wall0, cpu0, wait0 = time.perf_counter(), time.thread_time(), cpu_wait_s()
        while time.perf_counter() - wall0 < 1.0:
            pass
        wait1 = cpu_wait_s()
        assert wait0 is not None and wait1 is not None
        result["wall"] = time.perf_counter() - wall0
        result["running"] = time.thread_time() - cpu0
        result["waiting"] = wait1 - wait0

    try:
        thread = threading.Thread(target=busy)
        thread.start()
        thread.join()
    finally:
        hog.kill()
        hog.wait()
    wall, running, waiting = result["wall"], result["running"], result["waiting"]
    assert waiting > 0.2 * wall, result  # the hog took a real share of the core
    assert abs(running + waiting - wall) < 0.05 * wall, result
