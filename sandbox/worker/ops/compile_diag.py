"""Point a compile or import failure at the agent's own file, line and column.

Triton's CompilationError numbers lines from the start of the failing function's source
(its `def` line is 1); Python's errors number them in the file. Both are turned into
one shape: {"file", "line", "column" (1-based), "message", "excerpt"} — the compiler's
message and a caret under the column, without Triton's internal frames.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import traceback
from pathlib import Path

EXCERPT_LINES = 3  # lines of source shown up to and including the failing one


def excerpt(text: str, line: int, column: int | None) -> str:
    lines = text.splitlines()
    first = max(1, line - EXCERPT_LINES + 1)
    width = len(str(line))
    shown = [f"{n:>{width}} | {lines[n - 1]}" for n in range(first, min(line, len(lines)) + 1)]
    if column and shown:
        shown.append(" " * width + " | " + " " * (column - 1) + "^")
    return "\n".join(shown)


def located(file_name: str, text: str, line: int | None, column: int | None, message: str) -> dict:
    diag = {"file": file_name, "line": line, "column": column, "message": message}
    if line:
        diag["excerpt"] = excerpt(text, line, column)
    return diag


def import_error_diagnostic(exc: BaseException, file: Path, file_name: str, text: str) -> dict:
    """Syntax errors carry their own position; anything else: the deepest frame in the file."""
    if (
        isinstance(exc, SyntaxError)
        and exc.filename
        and Path(exc.filename).resolve() == file.resolve()
    ):
        return located(file_name, text, exc.lineno, exc.offset, f"SyntaxError: {exc.msg}")
    message = f"{type(exc).__name__}: {exc}"
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve() == file.resolve()
    ]
    if not frames:
        return {"file": file_name, "line": None, "column": None, "message": message}
    frame = frames[-1]
    column = frame.colno + 1 if getattr(frame, "colno", None) is not None else None
    return located(file_name, text, frame.lineno, column, message)


def compile_error_diagnostic(exc: BaseException, file: Path, file_name: str, text: str) -> dict:
    """The innermost Triton CompilationError whose function lives in the agent's file
    (an error inside a called @triton.jit helper points into the helper)."""
    from triton.compiler.errors import CompilationError

    chain, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, CompilationError):
            chain.append(current)
        current = current.__cause__ or current.__context__
    places = []  # (line, column, error), outermost call first
    for err in chain:
        start = _function_start_line(text, err.src)
        node_line = getattr(err.node, "lineno", None)
        if start is not None and node_line is not None:
            places.append((start + node_line - 1, getattr(err.node, "col_offset", 0) + 1, err))
    if not places:
        return {"file": file_name, "line": None, "column": None, "message": _message(exc)}
    line, column, err = places[-1]
    callers = list(dict.fromkeys(p[0] for p in places[:-1] if p[0] != line))
    message = _message(err) + (
        f" (called from line {', '.join(map(str, reversed(callers)))})" if callers else ""
    )
    return located(file_name, text, line, column, message)


def _message(err: BaseException) -> str:
    """The compiler's own words: Triton's error_message, else the underlying exception."""
    text = getattr(err, "error_message", None)
    if not text:
        cause = err.__cause__ or err.__context__
        text = f"{type(cause).__name__}: {cause}" if cause is not None else str(err)
    return text.strip()


def _function_start_line(text: str, src: str | None) -> int | None:
    """1-based line in `text` where the function source `src` (from its def) begins."""
    if not src:
        return None
    at = text.find(src)
    if at < 0:  # Triton may dedent nested definitions; match on the def line alone
        first = src.splitlines()[0].strip()
        at = next((text.find(line) for line in text.splitlines() if line.strip() == first), -1)
    return None if at < 0 else text.count("\n", 0, at) + 1


# "/jobs/j1/candidate.py:6:1: error: Failures have been detected ..." as MLIR prints it
_MLIR_ERROR = re.compile(r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$")
_GENERIC = "Failures have been detected while processing an MLIR pass pipeline"


def mlir_diagnostic(stderr: str, exc: BaseException, file: Path, file_name: str, text: str) -> dict:
    """MLIR/LLVM report errors on stderr with file:line:col; Python only sees
    'PassManager::run failed'. Name the errors, and the agent's line when one is given."""
    errors = [m for m in map(_MLIR_ERROR.match, stderr.splitlines()) if m]
    specific = [m for m in errors if _GENERIC not in m["msg"]]
    words = "; ".join(
        dict.fromkeys(
            f"{m['msg']} (at {_short(m['path'], file, file_name)}:{m['line']})"
            for m in specific or errors
        )
    )
    message = f"{type(exc).__name__}: {exc}" + (f": {words}" if words else "")
    mine = [m for m in errors if Path(m["path"]).name == file.name]
    if not mine:
        return {"file": file_name, "line": None, "column": None, "message": message[:4000]}
    return located(file_name, text, int(mine[0]["line"]), int(mine[0]["col"]), message[:4000])


def _short(path: str, file: Path, file_name: str) -> str:
    if Path(path).name == file.name:
        return file_name
    parts = Path(path).parts
    return "/".join(parts[parts.index("triton") :]) if "triton" in parts else Path(path).name


@contextlib.contextmanager
def captured_stderr_fd():
    """Capture what native code (MLIR, LLVM) writes to file descriptor 2; yields a
    callable returning it so far."""
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)

        def read() -> str:
            sink.seek(0)
            return sink.read()[-200_000:].decode(errors="replace")

        try:
            yield read
        finally:
            os.dup2(saved, 2)
            os.close(saved)
