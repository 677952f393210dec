"""py-spy as the profile tool runs it counts a thread that holds the GIL while it sleeps in a
native call as the holder, though the OS reports it asleep: the case the GIL finding exists
for (a communication binding that keeps the GIL across its wait)."""

import subprocess
import sys
import textwrap
import time

import pytest

from infra_agent.tools.profile.sampler import PySpy, py_spy_path

HOLDER = textwrap.dedent("""
    import ctypes, sys, threading, time
    usleep = ctypes.PyDLL(None).usleep  # PyDLL: the GIL stays held across the call
    usleep.argtypes = [ctypes.c_uint]
    def hold():
        while True:
            usleep(8000)      # 8 ms asleep in C, holding the GIL
            time.sleep(0.002)  # 2 ms with it released
    t = threading.Thread(target=hold, name="holder", daemon=True)
    t.start()
    print(t.native_id, flush=True)
    time.sleep(60)
""")


@pytest.mark.skipif(py_spy_path() is None, reason="py-spy is not installed")
def test_a_thread_asleep_in_a_native_call_holding_the_gil_is_counted_as_the_holder(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        holder_tid = int(proc.stdout.readline())
        spy = PySpy(proc.pid, tmp_path / "spy.txt", rate_hz=200, max_s=30)
        started = time.monotonic()
        time.sleep(1.5)
        spy.stop()
        elapsed = time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()
    assert not spy.error, spy.error
    holders = spy.holders()
    share = holders.get(holder_tid, {}).get("samples", 0) / (200 * elapsed)
    assert share > 0.4, (share, holders)  # it holds the GIL ~80% of the time (measured 0.78)
    assert "hold" in holders[holder_tid]["site"]
