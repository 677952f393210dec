"""A workspace: a folder of kernel specs plus a TOML config, and where its state lives.

``<root>/infra-agent.toml`` (optional; defaults below)::

    [kernels]
    paths = ["kernels"]          # folders holding <name>/spec.py, or kernel folders

    [serve.profiles.tiny]        # named serving setups (engine, model, args)
    engine = "builtin"

    [engines.vllm]               # the Python of an engine installed in a venv of its own
    python = "/opt/vllm/bin/python"   # (relative paths: to the workspace); default: `vllm` on PATH

    [acceptance.decode_latency]  # criteria a human set; tools compare against them
    metric = "tpot_p50_ms"
    max = 30.0

Without a ``--workspace`` the server uses the embedded zoo: this package's folder.
Loading a spec imports its ``spec.py`` (plain data, no torch); references and
implementations are only ever imported inside a sandbox worker.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .schema import KernelSpec, split_ref

CONFIG_NAME = "infra-agent.toml"
STATE_FOLDER = ".infra-agent"  # <workspace>/.infra-agent: ledger, seed secret, caches, jobs
MAX_FILE_BYTES = 1_000_000  # a source file a tool reads or hands to a job
MAX_PATH_CHARS, MAX_NAME_BYTES = 1_024, 255  # as Linux's PATH_MAX/NAME_MAX, minus slack
EMBEDDED_ROOT = Path(__file__).resolve().parent
DEFAULT_KERNEL_PATHS = ("kernels",)


def _path_for(folder: Path) -> str:
    """The kernel path that reaches a spec in `folder`: its parent folder (which holds <name>/spec.py)
    unless the spec sits at the root, which only "." reaches."""
    return "." if folder == Path(".") else str(folder.parent)


class WorkspaceError(Exception):
    """The workspace or one of its specs is unusable; the message says how to fix it."""


@dataclass
class Kernel:
    spec: KernelSpec
    folder: Path

    def source_of(self, ref: str) -> Path:
        """The file behind a "file.py:fn" reference."""
        return self.folder / split_ref(ref)[0]

    def entry_of(self, ref: str) -> tuple[Path, str]:
        """(file, function) of a "file.py:fn" reference."""
        return self.source_of(ref), split_ref(ref)[1]


@dataclass
class Workspace:
    root: Path
    config: dict = field(default_factory=dict)
    kernels: dict[str, Kernel] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # folder -> why its spec failed

    @property
    def is_embedded(self) -> bool:
        return self.root == EMBEDDED_ROOT

    @property
    def state_dir(self) -> Path:
        """Where the ledger, artifacts and caches live. The embedded zoo may sit in a
        read-only site-packages, so its state goes under the user's state directory."""
        if self.is_embedded:
            return embedded_state_dir(self.root)
        return self.root / ".infra-agent"

    @property
    def serve_profiles(self) -> dict[str, dict]:
        return self.config.get("serve", {}).get("profiles", {})

    def engine_python(self, engine: str) -> str | None:
        """`[engines.<engine>] python`: the interpreter of an engine with an install of its own
        (serving/interpreters.py), as an absolute path; None when the config names none."""
        python = self.config.get("engines", {}).get(engine, {}).get("python")
        if python is None:
            return None
        if not isinstance(python, str) or not python:
            raise WorkspaceError(f"{CONFIG_NAME}: [engines.{engine}] python must be a path")
        return str(self.root / Path(python).expanduser())

    @property
    def acceptance(self) -> dict[str, dict]:
        return self.config.get("acceptance", {})

    @property
    def kernel_paths(self) -> list[str]:
        """The config's kernel paths, workspace-relative (the zoo's own toml says ["."])."""
        return list(self.config.get("kernels", {}).get("paths", DEFAULT_KERNEL_PATHS))

    def spec_files(self) -> list[Path]:
        """Every ``<folder>/spec.py`` the config's kernel paths name, in load order."""
        files: list[Path] = []
        for rel in self.kernel_paths:
            base = (self.root / rel).resolve()
            files += [base / "spec.py"] if (base / "spec.py").is_file() else sorted(base.glob("*/spec.py"))
        return files

    def spec_search(self) -> str:
        """Where specs are looked for, and how to point elsewhere, in words (for answers that find
        none, or not the one asked for); names spec.py files nearby that the paths miss."""
        paths = ", ".join(f"{rel}/" for rel in self.kernel_paths)
        config = self.root / CONFIG_NAME
        text = (f"kernel specs are read from {paths} in {self.root} (each path a kernel folder holding spec.py, "
                f"or a folder of <name>/spec.py), as {CONFIG_NAME}'s [kernels] paths = "
                f"{json.dumps(self.kernel_paths)} "
                f"{'says' if config.is_file() else 'defaults to (there is no ' + CONFIG_NAME + ')'}")
        missed = self._missed_specs()
        if missed:
            where = ", ".join(str(f.relative_to(self.root)) for f in missed[:5])
            kept = [rel for rel in self.kernel_paths if (self.root / rel).is_dir()]
            suggest = sorted({_path_for(f.parent.relative_to(self.root)) for f in missed} - set(kept))
            text += (f"; {where} {'is' if len(missed) == 1 else 'are'} outside them: put paths = "
                     f"{json.dumps(kept + suggest)} under [kernels] in {config}")
        return text

    def _missed_specs(self) -> list[Path]:
        """spec.py files at most two folders below the root that no kernel path reaches."""
        loaded = {f.resolve() for f in self.spec_files()}
        found = [self.root / "spec.py", *self.root.glob("*/spec.py"), *self.root.glob("*/*/spec.py")]
        return [f for f in found if f.is_file() and f.resolve() not in loaded
                and not {STATE_FOLDER, ".venv", "site-packages"} & set(f.relative_to(self.root).parts)]

    def file(self, path: str | Path) -> Path:
        """An existing file of this workspace, absolute or workspace-relative: sandboxed
        code sees only the workspace, so anything outside it is refused here, and so is
        the server's own state folder (ledger, seed secret, caches) wherever it lies."""
        host, shown = self._resolve(path, "a source file")
        try:
            is_file = host.is_file()
            size = host.stat().st_size if is_file else 0
        except OSError as exc:
            raise WorkspaceError(f"cannot open {shown}: {exc.strerror or type(exc).__name__}; give a "
                                 "workspace-relative path to a readable source file") from None
        if not is_file:
            raise WorkspaceError(f"no such file in the workspace: {shown}")
        if size > MAX_FILE_BYTES:
            raise WorkspaceError(f"{shown} is {size} bytes; source files are at most {MAX_FILE_BYTES} bytes")
        return host

    def has_file(self, path: str | Path) -> bool:
        """Whether `file` would accept `path`: checked against the workspace before anything is
        opened (a host path outside it, /proc/1/root/..., is never even looked at)."""
        try:
            self.file(path)
        except WorkspaceError:
            return False
        return True

    def read_text(self, path: str | Path) -> str:
        """A workspace source file's text (checked as `file` does)."""
        return read_source(self.file(path), shown=path)

    def folder(self, path: str | Path) -> Path:
        """An existing folder of this workspace (a model checkpoint for an engine), checked as `file` is,
        and never one that holds the state folder (an engine sees the whole folder)."""
        host, shown = self._resolve(path, "a folder")
        if not host.is_dir():
            raise WorkspaceError(f"no such folder in the workspace: {shown}")
        if self.state_dir.resolve().is_relative_to(host):  # the workspace root, '.', a link to '/'
            raise WorkspaceError(f"{shown} holds the server's state folder ({STATE_FOLDER}: ledger, seed "
                                 "secret), which no tool shows; give a folder inside the workspace that "
                                 "holds only the model, e.g. 'models/my-model'")
        return host

    def _resolve(self, path: str | Path, what: str) -> tuple[Path, str]:
        """(host path, excerpt for messages) of a workspace path, refusing what lies outside the
        workspace or in the server's state folder."""
        shown = excerpt(path)
        _check_path_text(str(path), shown)
        root = self.root.resolve()
        if not Path(os.path.normpath(root / path)).is_relative_to(root):
            # by its text alone: nothing outside the workspace is ever looked at (resolve() would
            # read links on the host path first: /proc/1/root/... fails with EACCES there)
            raise WorkspaceError(f"{shown} is outside the workspace {root}; sandboxed code sees only "
                                 "workspace files: give a workspace-relative path")
        try:
            host = (root / path).resolve()  # an absolute `path` replaces root
            if host.is_relative_to(self.state_dir.resolve()) or STATE_FOLDER in host.relative_to(root).parts:
                raise WorkspaceError(f"{shown} is in the server's state folder, which no tool reads; "
                                     f"give {what} of the workspace")
        except ValueError:  # relative_to: outside the root
            raise WorkspaceError(f"{shown} is outside the workspace {root}; sandboxed code sees only "
                                 "workspace files: give a workspace-relative path") from None
        except OSError as exc:
            raise WorkspaceError(f"cannot open {shown}: {exc.strerror or type(exc).__name__}; give a "
                                 f"workspace-relative path to {what}") from None
        return host, shown

    def kernel(self, name: str) -> Kernel:
        if name in self.kernels:
            return self.kernels[name]
        known = ", ".join(sorted(self.kernels)) or "none"
        hint = f" (spec errors: {self.errors})" if self.errors else ""
        raise WorkspaceError(
            f"unknown kernel {excerpt(name)}; this workspace has: {known}{hint}. "
            "Call list_kernels to see them, or pass source= with entry= for ad-hoc code. "
            f"Where a spec of yours is missing: {self.spec_search()}."
        )


def embedded_state_dir(root: Path) -> Path:
    """The built-in zoo's state folder, one per checkout: keyed by the zoo's real path, so two
    clones (or installs) never share a ledger, blobs or caches."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    key = hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:12]
    return Path(base) / "infra-agent" / f"default-workspace-{key}"


def read_source(host: Path, shown: str | Path | None = None) -> str:
    """The text of a source file a tool reads on the host. The error never quotes the
    file's bytes (it may not be source at all): only the agent's own path is echoed."""
    shown = excerpt(shown if shown is not None else host.name)
    try:
        return host.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkspaceError(f"{shown} is not UTF-8 text (bad byte at offset {exc.start}); "
                             "give a Python, Triton or CUDA source file") from None
    except OSError as exc:
        raise WorkspaceError(f"cannot read {shown}: {exc.strerror or type(exc).__name__}") from None


def excerpt(value: object, limit: int = 80) -> str:
    """An argument as an error message quotes it: short and printable (the agent must
    recognise what it sent, not read it back), and never the content of a file."""
    text = value if isinstance(value, str) else str(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} chars)"


def _check_path_text(text: str, shown: str) -> None:
    if "\x00" in text:
        raise WorkspaceError(f"path {shown} contains a NUL byte; give a plain workspace-relative path")
    if len(text) > MAX_PATH_CHARS:
        raise WorkspaceError(f"path {shown} is longer than {MAX_PATH_CHARS} characters")
    try:
        parts = [p.encode("utf-8") for p in Path(text).parts]
    except UnicodeEncodeError:
        raise WorkspaceError(f"path {shown} is not valid UTF-8 text") from None
    if any(len(p) > MAX_NAME_BYTES for p in parts):
        raise WorkspaceError(f"path {shown} has a component longer than {MAX_NAME_BYTES} bytes (the file-name "
                             "limit); give an existing workspace file")


def load_workspace(root: str | Path | None = None) -> Workspace:
    root_path = EMBEDDED_ROOT if root is None else Path(root).expanduser().resolve()
    if not root_path.is_dir():
        raise WorkspaceError(
            f"workspace {str(root)!r} does not exist or is not a directory; pass an "
            "existing folder to --workspace, or omit it to use the built-in kernel zoo"
        )
    config_path = root_path / CONFIG_NAME
    config: dict = {}
    if config_path.is_file():
        try:
            config = tomllib.loads(config_path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise WorkspaceError(f"{config_path}: invalid TOML: {exc}") from exc
    ws = Workspace(root=root_path, config=config)
    for spec_file in ws.spec_files():
        folder = spec_file.parent
        try:
            spec = _load_spec(spec_file)
        except Exception as exc:  # a broken spec must not hide the others
            ws.errors[str(folder)] = f"{type(exc).__name__}: {exc}"
            continue
        ws.kernels[spec.name] = Kernel(spec=spec, folder=folder)
    return ws


def _load_spec(path: Path) -> KernelSpec:
    module_name = f"infra_agent_workspace_spec_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    assert loader_spec and loader_spec.loader
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    loader_spec.loader.exec_module(module)
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, KernelSpec):
        raise WorkspaceError(f"{path} must define SPEC = KernelSpec(...)")
    for impl, ref in {"reference": spec.reference, **spec.impls}.items():
        file_name = ref.partition(":")[0]
        if ":" not in ref or not (path.parent / file_name).is_file():
            raise WorkspaceError(f"{path}: {impl} = {ref!r} must be 'file.py:function' in {path.parent}")
    return spec
