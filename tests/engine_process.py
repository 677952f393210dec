"""A real built-in engine process on loopback, for the tests that talk to its HTTP API
(tests/serving/engine/test_engine_http.py, tests/server/test_agent_engine.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple


class EngineProcess(NamedTuple):
    url: str  # http://127.0.0.1:PORT, as its ready line says
    proc: subprocess.Popen


@contextmanager
def engine_process(*args: str, ready_within_s: float = 60) -> Iterator[EngineProcess]:
    """`python -m infra_agent.serving.engine --port 0 ARGS`, yielded once it prints its ready line,
    terminated after. Fails the test when it exits or stays silent for `ready_within_s`."""
    cmd = [sys.executable, "-m", "infra_agent.serving.engine", "--port", "0", *args]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url, deadline = None, time.monotonic() + ready_within_s
    try:
        while time.monotonic() < deadline and url is None:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            match = re.search(r"ready at (http://\S+)", line)
            url = match.group(1) if match else None
        assert url, f"the engine did not report readiness (exit code {proc.poll()})"
        yield EngineProcess(url, proc)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
