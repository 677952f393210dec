"""What the server holds for its lifetime (`ServerState`) and hands a tool per call
(`CallContext`, the implementation of tools/base.py's ToolContext)."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..kernels.workspace import CONFIG_NAME, Workspace, load_workspace
from .ledger import Ledger

if TYPE_CHECKING:  # imported lazily at run time (see ServerState.sandbox)
    from ..sandbox import Sandbox

ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class ServerState:
    """One workspace, one ledger, and at most one sandbox, shared by every call."""

    def __init__(self, workspace: Workspace, *, allow_unsandboxed: bool = False):
        self.workspace = workspace
        self.allow_unsandboxed = allow_unsandboxed
        self._ledger: Ledger | None = None
        self._ledger_lock = threading.Lock()
        self._sandbox: Sandbox | None = None
        self._signature = _signature(workspace)
        self._reload_lock = threading.Lock()

    def refresh_workspace(self) -> Workspace:
        """The workspace as it is now: reloaded when its config or a spec.py changed,
        since the agent may add or edit kernels while the server runs (a stat per spec;
        a reload only on change)."""
        with self._reload_lock:
            if _signature(self.workspace) != self._signature:
                self.workspace = load_workspace(self.workspace.root)
                self._signature = _signature(self.workspace)
            return self.workspace

    @property
    def ledger(self) -> Ledger:
        """Opened on first use, so listing tools never touches the state directory."""
        with self._ledger_lock:  # first calls may arrive on several threads at once
            if self._ledger is None:
                self._ledger = Ledger(self.workspace.state_dir / "ledger.sqlite")
            return self._ledger

    @property
    def artifacts_dir(self) -> Path:
        return self.workspace.state_dir / "artifacts"

    @property
    def sandbox(self) -> Sandbox:
        """The shared Sandbox, constructed on first use (imported lazily: the server
        starts without it, and tools that never run code never pay for it)."""
        if self._sandbox is None:
            try:
                from ..sandbox import Sandbox
            except ImportError as exc:
                raise RuntimeError(f"the sandbox runner is not available in this install ({exc})") from exc
            self._sandbox = Sandbox(self.workspace.root, self.workspace.state_dir,
                                    allow_unsandboxed=self.allow_unsandboxed)
        return self._sandbox

    async def aclose(self) -> None:
        if self._sandbox is not None:
            await self._sandbox.aclose()
            self._sandbox = None
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None


def _signature(ws: Workspace) -> tuple:
    """What a reload would see differently: the config file and every spec.py, by mtime."""
    files = [ws.root / CONFIG_NAME, *ws.spec_files()]
    return tuple((str(f), f.stat().st_mtime_ns if f.exists() else None) for f in files)


class CallContext:
    """The ToolContext for one tool call (one experiment)."""

    def __init__(self, state: ServerState, experiment_id: str, mcp_context: Any = None):
        self._state = state
        self.workspace = state.workspace
        self.experiment_id = experiment_id
        self._mcp = mcp_context
        self.artifacts: list[str] = []

    @property
    def sandbox(self) -> Sandbox:
        return self._state.sandbox

    def experiments(self, **filters: Any) -> list[dict]:
        """Ledger rows, newest first (filters: see Ledger.query)."""
        return self._state.ledger.query(**filters)

    async def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        if self._mcp is None:
            return
        try:
            await self._mcp.report_progress(done, total, message or None)
        except Exception:  # progress is advisory: a client that went away must not fail the call
            pass

    def artifact(self, name: str, data: bytes | str | Path) -> str:
        if not ARTIFACT_NAME.match(name) or ".." in name:
            raise ValueError(f"artifact name {name!r} must be a plain file name (letters, digits, . _ -)")
        folder = self._state.artifacts_dir / self.experiment_id
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / name
        if isinstance(data, Path):
            shutil.copyfile(data, target)
        elif isinstance(data, str):
            target.write_text(data)
        else:
            target.write_bytes(data)
        uri = f"artifact://{self.experiment_id}/{name}"
        if uri not in self.artifacts:
            self.artifacts.append(uri)
        return uri

    def experiment(self, experiment_id: str) -> dict | None:
        return self._state.ledger.get(experiment_id)
