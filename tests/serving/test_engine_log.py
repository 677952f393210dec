"""An engine's error message carries the first exception in its log, wherever it lies: a real
Python traceback (a subprocess raising) followed by more output than the tail shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infra_agent.serving.engine_log import first_error_line

RAISES = r"""
import logging, sys
logging.basicConfig(stream=sys.stdout, format="(Worker) %(levelname)s %(message)s")
logging.warning("fallback to torch linear. Exception: could not create a primitive")
logging.warning("ValueError: a warning that quotes an exception is not the cause")
print("loaded", flush=True)
try:
    raise RuntimeError("Unsupported CPU attention configuration: head_dim=16")
except RuntimeError:
    logging.exception("WorkerProc hit an exception.")
for i in range(3000):
    print(f"shutdown step {i}: EngineDeadError follows, see the stack trace above")
raise SystemExit(1)
"""


def test_the_first_exception_is_found_past_warnings_and_far_above_the_tail(tmp_path: Path):
    log = tmp_path / "engine.log"
    with open(log, "w") as out:
        subprocess.run([sys.executable, "-c", RAISES], stdout=out, stderr=subprocess.STDOUT)
    lines = log.read_text().splitlines()
    number, text = first_error_line(log)
    assert text == "RuntimeError: Unsupported CPU attention configuration: head_dim=16"
    assert lines[number - 1].endswith(text)  # as Python's traceback printed it
    assert len(lines) - number >= 3000  # far above any tail an error message shows
    clean = tmp_path / "clean.log"
    clean.write_text("\n".join(lines[:3]))  # the two warnings and "loaded"
    assert first_error_line(clean) is None and first_error_line(tmp_path / "missing") is None
