"""Which code a call ran, per role: the identity compare_experiments and the report compare.

A call's snapshot (snapshots.py) keeps every file a rerun needs: the whole kernel folder. That
is too much to answer "did these two calls run the same code": a check of impl `good` and one of
impl `stride_bug` keep the same folder, yet ran different functions. So each call also records,
per role it ran (`candidate`, `baseline`, `reference`), its entry: the file and function it
called, the sha256 of that function's own source text, and the files the code ran, by hash: the
entry's file and the workspace files it imports, transitively (a kernel file imports its
siblings by plain name: the worker puts the file's folder first on sys.path).

Two roles ran the same code when they call the same function of the same files, byte for byte.
Two impls in one file are told apart by the function they call; when the file is the same, the
answer says so ("one file, two functions") rather than pretending the files differ.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .coderef import (
    REFERENCE,
    CodeRef,
    agent_code,
    default_impl,
    impl_code,
    looks_like_source,
    parse_python,
    ref_or_source,
)
from .workspace import Workspace, WorkspaceError

MAX_IMPORTED_FILES = 64  # per role: a larger closure is cut (the first files still count)
ROLES = ("candidate", "baseline", "reference")
EXPERIMENT_ID = re.compile(r"^e\d{5,}-[0-9a-f]{4}$")


@dataclass(frozen=True)
class RanCode:
    """One role's code: what it called and every file it ran, by hash."""

    label: str  # for people: the impl name, 'source', a path, or the experiment id rerun
    entry_file: str  # workspace-relative path, or 'source= (inline)' / '<arg>= (inline)'
    function: str | None  # the function called; None where the tool picks it (compile_kernel)
    function_sha256: str | None  # of the function's own source text; None when not found
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256: entry file + imports

    @property
    def where(self) -> str:
        return f"{self.entry_file}:{self.function}" if self.function else self.entry_file

    def same_code(self, other: RanCode) -> bool:
        return self.files == other.files and self.function == other.function

    def same_entry(self, other: RanCode) -> bool:
        """The same function of the same file, whatever its bytes are (an edit keeps the entry)."""
        return (self.entry_file, self.function) == (other.entry_file, other.function)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> RanCode | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                label=str(data["label"]),
                entry_file=str(data["entry_file"]),
                function=data.get("function"),
                function_sha256=data.get("function_sha256"),
                files={str(k): str(v) for k, v in (data.get("files") or {}).items()},
            )
        except (KeyError, TypeError):
            return None


def inline_name(argument: str) -> str:
    """How people see inline code given as `argument`: 'source= (inline)'."""
    return f"{argument}= (inline)"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def function_text(source: str, function: str | None) -> str | None:
    """The source text of module-level `def function` (decorators included), or None."""
    if not function:
        return None
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError, RecursionError):  # not Python, or nested past the parser
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = source.splitlines(keepends=True)
            return "".join(lines[first - 1 : node.end_lineno])
    return None


def file_code(
    label: str, path: Path, function: str | None, root: Path, hidden: Path
) -> RanCode:
    """A role that calls `function` in workspace file `path` (host path, resolved)."""
    data = path.read_bytes()
    text = data.decode("utf-8", "replace")
    found = function_text(text, function)
    return RanCode(
        label=label,
        entry_file=path.relative_to(root).as_posix(),
        function=function,
        function_sha256=sha256(found.encode()) if found is not None else None,
        files=imported_files(path, root, hidden),
    )


def inline_code(label: str, name: str, text: str, function: str | None) -> RanCode:
    """A role that calls `function` in inline source given as argument `name`."""
    found = function_text(text, function)
    return RanCode(
        label=label,
        entry_file=name,
        function=function,
        function_sha256=sha256(found.encode()) if found is not None else None,
        files={name: sha256(text.encode("utf-8", "surrogatepass"))},
    )


def imported_files(start: Path, root: Path, hidden: Path) -> dict[str, str]:
    """`start` and the workspace files it imports, transitively, by relative path -> sha256.
    Imports resolve as the worker resolves them: the importing file's folder first (plain
    names), relative imports against their package folder; files outside the workspace (the
    standard library, torch) or in the server's state folder are not the workspace's code."""
    files: dict[str, str] = {}
    queue = [start]
    while queue and len(files) < MAX_IMPORTED_FILES:
        path = queue.pop(0)
        if not path.is_relative_to(root) or path.is_relative_to(hidden):
            continue
        rel = path.relative_to(root).as_posix()
        if rel in files:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        files[rel] = sha256(data)
        queue.extend(_imports(path, data))
    return dict(sorted(files.items()))


def _imports(path: Path, data: bytes) -> list[Path]:
    try:
        tree = parse_python(data)
    except (SyntaxError, ValueError, RecursionError):
        return []
    found: list[Path] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found += _module_files(path.parent, alias.name.split("."))
        elif isinstance(node, ast.ImportFrom):
            base = path.parent
            for _ in range(max(node.level - 1, 0)):
                base = base.parent
            parts = node.module.split(".") if node.module else []
            found += _module_files(base, parts)
            for alias in node.names:  # `from pkg import module`
                found += _module_files(base, [*parts, alias.name])
    return found


def _module_files(base: Path, parts: list[str]) -> list[Path]:
    """The files of a dotted module under `base` (each package's __init__.py on the way)."""
    if not parts:
        return []
    files = []
    for i in range(1, len(parts) + 1):
        package = base.joinpath(*parts[:i])
        files.append(package / "__init__.py")
    files.append(base.joinpath(*parts[:-1], parts[-1] + ".py"))
    return [f.resolve() for f in files if f.is_file()]


Lookup = Callable[[str], "dict | None"]  # an experiment id -> its ledger row, or None


def ran_codes(workspace: Workspace, kernel_name: object, args: dict, lookup: Lookup) -> dict[str, RanCode]:
    """The code each role of a call runs, from its validated arguments (`impl`, `source`,
    `path`, `entry`, `baseline*`, `reference*`): before any job starts. A role that cannot be
    resolved here is left out (the tool's own error says why; a snapshot never fails a call)."""
    kernel = workspace.kernels.get(kernel_name) if isinstance(kernel_name, str) else None
    root, hidden = workspace.root.resolve(), workspace.state_dir.resolve()
    roles: dict[str, RanCode] = {}

    def add(role: str, make: Callable[[], RanCode | None]) -> None:
        try:
            code = make()
        except (WorkspaceError, OSError, ValueError, RecursionError):
            return
        if code is not None:
            roles[role] = code

    def from_ref(label: str, ref: CodeRef, inline_arg: str) -> RanCode:
        if ref.source is not None:
            return inline_code(label, inline_name(inline_arg), ref.source, ref.entry)
        assert ref.path is not None
        return file_code(label, ref.path.resolve(), ref.entry, root, hidden)

    if args.get("source") is not None or args.get("path") is not None:
        add("candidate", lambda: from_ref(
            "source" if args.get("source") is not None else str(args["path"]),
            agent_code(workspace, source=args.get("source"), path=args.get("path"),
                       entry=args.get("entry"), require_entry=False), "source"))
    elif kernel is not None and "impl" in args:
        add("candidate", lambda: from_ref(
            args.get("impl") or "", impl_code(kernel, args.get("impl"), allow_reference=True),
            "source"))
        if "candidate" in roles and not roles["candidate"].label:
            roles["candidate"] = replace(roles["candidate"], label=default_impl(kernel) or "")
    baseline = args.get("baseline")
    baseline_entry = args.get("baseline_entry") or args.get("entry")
    if args.get("baseline_source") is not None or args.get("baseline_path") is not None:
        add("baseline", lambda: from_ref(
            "baseline_source" if args.get("baseline_source") is not None
            else str(args["baseline_path"]),
            agent_code(workspace, source=args.get("baseline_source"),
                       path=args.get("baseline_path"), entry=baseline_entry,
                       require_entry=False), "baseline_source"))
    elif isinstance(baseline, str) and kernel is not None and (
        baseline == REFERENCE or baseline in kernel.spec.impls
    ):
        add("baseline", lambda: from_ref(baseline, impl_code(kernel, baseline,
                                                             allow_reference=True), "baseline"))
    elif isinstance(baseline, str) and EXPERIMENT_ID.match(baseline):
        add("baseline", lambda: _recorded_candidate(baseline, lookup))
    elif isinstance(baseline, str) and looks_like_source(baseline):
        add("baseline", lambda: inline_code("baseline", inline_name("baseline"), baseline,
                                            baseline_entry))
    reference = args.get("reference")
    if isinstance(reference, str) and reference:
        add("reference", lambda: from_ref(
            "reference=", ref_or_source(workspace, reference, kernel,
                                        args.get("reference_entry")), "reference"))
    elif kernel is not None and roles:
        add("reference", lambda: from_ref(
            REFERENCE, impl_code(kernel, REFERENCE, allow_reference=True), "reference"))
    return roles


def _recorded_candidate(experiment_id: str, lookup: Lookup) -> RanCode | None:
    """baseline=<experiment id> reruns that experiment's code from its snapshot: its candidate."""
    row = lookup(experiment_id) or {}
    code = row.get("code") if isinstance(row.get("code"), dict) else {}
    recorded = RanCode.from_json((code.get("ran") or {}).get("candidate"))
    if recorded is None:
        return None
    return replace(recorded, label=experiment_id)
