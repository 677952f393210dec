"""Load agent code (inline source or a file) and find its entry function.

Inline source is written to a file in the job folder before import: Triton's
``@triton.jit`` reads the function's source with ``inspect``, and tracebacks then
point at real line numbers of the agent's code.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Callable

from .context import JobContext

CANDIDATE_FILE = "candidate.py"


class LoadError(Exception):
    """The code could not be loaded or has no usable entry; the message says why."""


def load_entry(
    ctx: JobContext,
    *,
    entry: str,
    source: str | None = None,
    path: str | None = None,
    module_name: str = "candidate",
) -> Callable:
    if (source is None) == (path is None):
        raise LoadError("give exactly one of source (inline Python) or path (a file)")
    ensure_triton_interpreter()
    if source is not None:
        file = ctx.job_dir / f"{module_name}.py"
        file.write_text(source)
    else:
        file = Path(path)
        if (
            not file.is_absolute()
        ):  # a file the parent copied into this job's folder (a code snapshot)
            file = ctx.job_dir / file
        if not file.is_file():
            raise LoadError(f"no such file: {path}")
    module = import_file(file, module_name)
    fn = getattr(module, entry, None)
    if fn is None:
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise LoadError(
            f"{file.name} has no function {entry!r}; it defines: {', '.join(names) or 'nothing callable'}"
        )
    if not callable(fn):
        raise LoadError(f"{entry!r} in {file.name} is a {type(fn).__name__}, not a function")
    return fn


def ensure_triton_interpreter() -> None:
    """Make Triton's own @jit helpers interpretable when TRITON_INTERPRET=1 arrived after
    `triton.language` was imported (a warm zygote imports it before a job's env is set).

    `@triton.jit` picks JITFunction or InterpretedFunction at decoration time, so the
    library's helpers (tl.sum, tl.max, tl.rand, ...) stay JITFunctions and the
    interpreter refuses to call them ("Cannot call @triton.jit'd outside of the scope of
    a kernel"). Rewrapping their Python functions is what a fresh import would do.
    """
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    _rewrap_triton_helpers(to_interpreter=True)


def ensure_triton_compiler() -> None:
    """The reverse of ensure_triton_interpreter, for an ahead-of-time compile in a process
    that ran interpreted kernels before (the built-in engine, an in-process test run):
    Triton's own helpers become JITFunctions again, as a fresh import would make them."""
    _rewrap_triton_helpers(to_interpreter=False)


def _rewrap_triton_helpers(to_interpreter: bool) -> None:
    """Rewrap every @jit helper of an imported triton.language as the other kind of function."""
    if "triton.language" not in sys.modules:
        return
    import triton.runtime.interpreter as interp
    import triton.runtime.jit as jit

    old, new = (
        (jit.JITFunction, interp.InterpretedFunction)
        if to_interpreter
        else (interp.InterpretedFunction, jit.JITFunction)
    )
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("triton.language"):
            continue
        for attr, value in list(vars(module).items()):
            if type(value) is old:
                setattr(module, attr, new(value.fn))


def import_file(file: Path, module_name: str):
    """Import a file as a fresh module; its folder goes first on sys.path for sibling imports."""
    _prefer_siblings(Path(file).parent)
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)  # agent code runs here: exceptions propagate
    return module


def _prefer_siblings(folder: Path) -> None:
    """A kernel file imports its siblings by plain name (`from reference import EPS`): its own
    folder goes first on sys.path, and a same-named module cached from another folder is
    forgotten, so it never answers this file's import. A job loads one kernel, but the
    built-in engine (and an in-process test run) loads several in one process."""
    text = str(folder)
    if text in sys.path:
        sys.path.remove(text)
    sys.path.insert(0, text)
    here = folder.resolve()
    for sibling in folder.glob("*.py"):
        cached = sys.modules.get(sibling.stem)
        origin = getattr(cached, "__file__", None)
        if cached is not None and origin and Path(origin).resolve().parent != here:
            del sys.modules[sibling.stem]


def check_arity(fn: Callable, num_args: int, entry: str) -> None:
    """Fail early, with the signature, when the entry cannot take the spec's arguments."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and some wrappers have no signature; the call will tell
    try:
        sig.bind(*range(num_args))
    except TypeError as exc:
        raise LoadError(
            f"{entry}{sig} cannot be called with {num_args} positional arguments: {exc}"
        ) from None
