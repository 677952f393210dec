"""An engine's log, read for an error message: the first exception it printed.

A dying engine's last lines are often its shutdown (vLLM: "EngineDeadError ... see the stack
trace above"); the cause lies higher up. Engine.log_excerpt (lifecycle.py) puts this line
before the log's tail.
"""

from __future__ import annotations

import re
from pathlib import Path

# "RuntimeError: ...", "torch.OutOfMemoryError: ...": an exception as Python prints it, on a line
# not logged as a warning
_EXCEPTION = re.compile(r"\b(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception): \S")
_SCAN_BYTES = 64 << 20  # an engine's log is capped by its disk limit; read at most this much


def first_error_line(log: Path) -> tuple[int, str] | None:
    """(1-based line number, the line from its exception on) of the first exception in `log`."""
    try:
        with open(log, errors="replace") as f:
            read = 0
            for number, line in enumerate(f, 1):
                read += len(line)
                if read > _SCAN_BYTES:
                    return None
                match = _EXCEPTION.search(line)
                if match and "WARNING" not in line[: match.start()]:
                    return number, line[match.start() :].strip()[:500]
    except OSError:
        return None
    return None
