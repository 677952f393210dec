"""One way to name code, for every tool: a kernel spec's implementation, a workspace file,
or inline source, each with the function to call. `resolve_code` turns a tool's
arguments into a `CodeRef`; a job sees it as `CodeRef.payload(...)`.

The default implementation of a spec, everywhere: DEFAULT_IMPL_RULE.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .schema import split_ref
from .workspace import Kernel, Workspace, WorkspaceError, read_source

DEFAULT_IMPL_RULE = "'triton' if the spec has it, else its first implementation"
REFERENCE = "reference"  # the impl name that means the spec's reference

# ast.parse is not thread-safe on CPython 3.11 (gh-106905): the AST constructor's recursion
# counter is shared, so two threads parsing at once can fail with "SystemError: AST
# constructor recursion depth mismatch". Tool calls run in threads: every parse in the
# server process goes through parse_python.
_PARSE_LOCK = threading.Lock()


def parse_python(source: str | bytes, mode: str = "exec") -> ast.AST:
    """ast.parse, one thread at a time (see _PARSE_LOCK)."""
    with _PARSE_LOCK:
        return ast.parse(source, mode=mode)


class CodeRefError(WorkspaceError):
    """The arguments do not name runnable code; the message says what to give."""


@dataclass(frozen=True)
class CodeRef:
    """`entry` in a workspace file (`path`, on the host) or in inline `source`."""

    entry: str | None  # None only where the tool picks the function itself (compile_kernel)
    path: Path | None = None
    source: str | None = None
    kernel: str | None = None  # the spec it came from, if any
    impl: str | None = None  # the spec's implementation name ('reference' for its reference)

    @property
    def is_reference(self) -> bool:
        return self.impl == REFERENCE

    def text(self) -> str:
        """The code itself (inline source, or the file's text)."""
        return self.source if self.source is not None else read_source(self.path)

    def payload(self, workspace_path: Callable[[Path], str]) -> dict:
        """How a job names it ({"entry", "path"} or {"entry", "source"}); `workspace_path`
        maps a host file to where the job sees it (Sandbox.workspace_path)."""
        if self.source is not None:
            return {"entry": self.entry, "source": self.source}
        return {"entry": self.entry, "path": workspace_path(self.path)}


def default_impl(kernel: Kernel) -> str | None:
    impls = kernel.spec.impls
    return "triton" if "triton" in impls else next(iter(impls), None)


def spec_code(kernel: Kernel, ref: str, impl: str | None = None) -> CodeRef:
    """A 'file.py:fn' reference of a spec (impl, reference, make_inputs), in its folder."""
    file_name, entry = split_ref(ref)
    return CodeRef(entry=entry, path=kernel.folder / file_name, kernel=kernel.spec.name, impl=impl)


def impl_code(kernel: Kernel, impl: str | None = None, *, allow_reference: bool = False) -> CodeRef:
    """Implementation `impl` of a spec (default: DEFAULT_IMPL_RULE); 'reference' names the
    spec's reference where `allow_reference`."""
    spec = kernel.spec
    impl = impl or default_impl(kernel)
    if allow_reference and impl == REFERENCE:
        return spec_code(kernel, spec.reference, REFERENCE)
    if impl not in spec.impls:
        names = [REFERENCE, *spec.impls] if allow_reference else list(spec.impls)
        raise CodeRefError(f"kernel {spec.name!r} has no impl {impl!r}; it has: {', '.join(names)}")
    return spec_code(kernel, spec.impls[impl], impl)


def agent_code(workspace: Workspace, *, source: str | None, path: str | None, entry: str | None,
               what: str = "code", entry_field: str = "entry", require_entry: bool = True) -> CodeRef:
    """Code the agent wrote: inline `source` or a workspace file `path`, calling `entry`."""
    if source is not None and path is not None:
        raise CodeRefError(f"give source= or path= for the {what}, not both")
    if require_entry and not entry:
        raise CodeRefError(f"{entry_field}= is required with source= or path=: the function to call in the {what}")
    if source is not None:
        return CodeRef(entry=entry, source=source)
    return CodeRef(entry=entry, path=workspace.file(path))


def resolve_code(workspace: Workspace, *, kernel: Kernel | None = None, impl: str | None = None,
                 source: str | None = None, path: str | None = None, entry: str | None = None,
                 what: str = "code", entry_field: str = "entry", require_entry: bool = True,
                 allow_reference: bool = False) -> CodeRef:
    """The one resolver: agent code (source=/path= with entry=) wins over a spec's impl."""
    if source is not None or path is not None:
        return agent_code(workspace, source=source, path=path, entry=entry, what=what, entry_field=entry_field,
                          require_entry=require_entry)
    if kernel is None:
        with_entry = f" with {entry_field}=" if require_entry else ""
        raise CodeRefError(f"name the {what}: kernel= (with impl=), or source=/path={with_entry}")
    return impl_code(kernel, impl, allow_reference=allow_reference)


def looks_like_source(text: str) -> bool:
    """A one-string code argument holds code (not a 'file.py:fn', impl name or experiment id)."""
    return "def " in text or "\n" in text or "__global__" in text


def ref_or_source(workspace: Workspace, ref: str, kernel: Kernel | None, entry: str | None) -> CodeRef:
    """An override given as one string: Python source (calling `entry`), or 'file.py:fn'
    in the kernel's folder when that file is there, else in the workspace root."""
    if looks_like_source(ref):
        if not entry:
            raise CodeRefError("the code is given as source: name the function to call")
        return CodeRef(entry=entry, source=ref)
    try:
        file_name, fn = split_ref(ref)
    except ValueError as exc:
        raise CodeRefError(str(exc)) from None
    # Path.is_file() would stat a host path before the workspace check (/proc/1/root/...: EACCES)
    base = kernel.folder if kernel and workspace.has_file(kernel.folder / file_name) else workspace.root
    return CodeRef(entry=fn, path=workspace.file(str(base / file_name)))
