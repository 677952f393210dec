"""bench/fanout_overhead.py cleans up after itself: its Ray folder under /tmp is gone when it ends."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fanout_overhead.py"


@pytest.mark.slow
def test_the_fanout_bench_leaves_no_ray_folder_behind():
    pytest.importorskip("ray", reason="ray is not installed (make setup installs it)")
    done = subprocess.run(
        [sys.executable, str(BENCH), "--jobs", "2", "--burst", "2", "--pause", "0"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (folder,) = re.findall(r"Ray's folder (/tmp/iaray-\S+):", done.stdout)
    assert not Path(folder).exists(), f"{folder} was left behind"
    assert "through Ray" in done.stdout  # the run measured what it measures
