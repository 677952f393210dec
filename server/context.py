"""What the server holds for its lifetime (`ServerState`) and hands a tool per call
(`CallContext`, the implementation of tools/base.py's ToolContext)."""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import anyio

from ..kernels.code_identity import ran_codes
from ..kernels.coderef import looks_like_source
from ..kernels.snapshots import SnapshotRecorder
from ..kernels.workspace import CONFIG_NAME, Workspace, load_workspace
from ..tools.base import AgentError, CallOutcome, Progress, Tool
from .late_artifacts import LateArtifacts
from .ledger import Ledger

if TYPE_CHECKING:  # imported lazily at run time (see ServerState.sandbox)
    from ..sandbox import Sandbox
    from ..sandbox.cluster import RayExecutor
    from ..sandbox.job import Job, JobResult, Placement

ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")

# A client that drives the tools for a model (`infra-agent agent`, or any other loop)
# names its run in the request's `_meta` under this key: {"run_id": str, "step": int,
# "model": str}. The ledger stores it with the experiment, so a run's calls can be listed.
RUN_META_KEY = "infra-agent/run"
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


def run_link(mcp_context: Any) -> dict | None:
    """The agent run a tool call belongs to, from its request `_meta`; None when the
    caller named none. Malformed values are dropped, not trusted: this is metadata."""
    try:
        meta = mcp_context.request_context.meta or {}
    except (AttributeError, ValueError):  # no MCP context (a direct call), or outside a request
        return None
    link = meta.get(RUN_META_KEY)
    if (
        not isinstance(link, dict)
        or not isinstance(link.get("run_id"), str)
        or not RUN_ID.match(link["run_id"])
    ):
        return None
    step, model = link.get("step"), link.get("model")
    return {
        "run_id": link["run_id"],
        "step": step if isinstance(step, int) and not isinstance(step, bool) else None,
        "model": model[:200] if isinstance(model, str) else None,
    }


@dataclass(frozen=True)
class CallOrigin:
    """Who made a call: the agent over MCP (its request context, for progress, and its run), or
    another call (a sweep's trial: no MCP context of its own, the parent's run and id)."""

    mcp_context: Any = None
    run: dict | None = None
    parent_id: str | None = None
    # a trial's progress, handed to its caller when it asked (a sweep forwards it as its own)
    progress: Progress | None = None


@dataclass(frozen=True)
class ClusterConfig:
    """`serve --cluster` or the workspace's [cluster] table: jobs run on a Ray cluster."""

    address: str  # "auto" (the cluster `ray start` made on this host) or HOST:PORT of its head
    # per job kind ("compile", "run", "timing"): the Ray resources a job asks for, over the
    # executor's defaults (sandbox/cluster.py), e.g. {"timing": {"GPU": 1, "accelerator_type:H200": 0.001}}
    resources: dict[str, dict[str, float]] = field(default_factory=dict)
    retries: int = 1  # times a job is started again on another node after its node died
    node_dir: str | None = None  # where nodes keep workspace copies and job folders (default: /tmp)

    @classmethod
    def from_workspace(cls, config: dict, address: str | None) -> "ClusterConfig | None":
        """`address` (the command line) over [cluster] address; None: run jobs locally."""
        table = config.get("cluster", {})
        address = address or table.get("address")
        if not address:
            return None
        return cls(
            address=str(address),
            resources={
                k: {r: float(v) for r, v in d.items()}
                for k, d in table.get("resources", {}).items()
            },
            retries=int(table.get("retries", 1)),
            node_dir=table.get("node_dir"),
        )


class ServerState:
    """One workspace, one ledger, and at most one sandbox, shared by every call."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        allow_unsandboxed: bool = False,
        engine_pythons: dict[str, str] | None = None,
        cluster: ClusterConfig | None = None,
    ):
        self.workspace = workspace
        self.allow_unsandboxed = allow_unsandboxed
        self.engine_pythons = dict(engine_pythons or {})  # --engine-python, for Engines
        self.cluster = cluster
        self._ledger: Ledger | None = None
        self._ledger_lock = threading.Lock()
        self._sandbox: Sandbox | None = None
        self._executor: RayExecutor | None = None
        self._engines: Any = None  # serving.lifecycle.Engines, made on first use
        self._signature = _signature(workspace)
        self._reload_lock = threading.Lock()
        self.stopping = (
            False  # set at shutdown: new calls are refused, running ones get a grace period
        )
        self._num_in_flight = 0
        self.late_artifacts = LateArtifacts()  # plots drawn after the reply (late_artifacts.py)
        self.tools: dict[str, Tool] = {}  # set by build_server: what CallContext.call may call
        # set by build_server: tool module -> why it did not import (app.discover_tools)
        self.tools_not_loaded: dict[str, str] = {}

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """Counts one running tool call (what a shutdown waits for)."""
        self._num_in_flight += 1
        try:
            yield
        finally:
            self._num_in_flight -= 1

    async def drain(self, grace_s: float) -> bool:
        """Stop taking calls and wait up to `grace_s` for the running ones; True if none is left."""
        self.stopping = True
        deadline = time.monotonic() + grace_s
        while self._num_in_flight and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        return self._num_in_flight == 0

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
                raise RuntimeError(
                    f"the sandbox runner is not available in this install ({exc})"
                ) from exc
            self._sandbox = Sandbox(
                self.workspace.root,
                self.workspace.state_dir,
                allow_unsandboxed=self.allow_unsandboxed,
            )
        return self._sandbox

    @property
    def executor(self) -> "Sandbox | RayExecutor":
        """Where tools' jobs run: the local sandbox, or with a cluster configured the Ray
        executor (joined on first use; services and host-bound jobs stay on the sandbox)."""
        if self.cluster is None:
            return self.sandbox
        if self._executor is None:
            from ..sandbox.cluster import NodeConfig, RayExecutor, default_base_dir
            from ..tools.common import provenance

            node = NodeConfig(
                base_dir=self.cluster.node_dir or default_base_dir(),
                session=uuid.uuid4().hex[:12],
                limits=self.sandbox.limits,
                device_facts=provenance.device_facts,
                fingerprint=provenance.fingerprint,
            )
            self._executor = RayExecutor(
                self.sandbox,
                self.cluster.address,
                node=node,
                resources=self.cluster.resources,
                retries=self.cluster.retries,
            )
        return self._executor

    @property
    def engines(self) -> Any:
        """The serving engines this server started (serving/lifecycle.py), made on first use."""
        if self._engines is None:
            from ..serving.lifecycle import Engines

            self._engines = Engines(
                self.sandbox,
                pythons=self.engine_pythons,
                cluster=(lambda: self.executor) if self.cluster is not None else None,
            )
        return self._engines

    async def aclose(self) -> None:
        if (
            self._engines is not None
        ):  # engines first: they live in the sandbox's cgroups and folders
            await self._engines.aclose()
            self._engines = None
        if self._executor is not None:
            await self._executor.aclose()
            self._executor = None
        if self._sandbox is not None:
            await self._sandbox.aclose()
            self._sandbox = None
        await anyio.to_thread.run_sync(self.late_artifacts.close)  # files the replies already named
        if self._ledger is not None:
            # a call cut off by the shutdown never reached its own close: say so
            self._ledger.interrupt_running("the server shut down before this call finished")
            self._ledger.close()
            self._ledger = None


def _signature(ws: Workspace) -> tuple:
    """What a reload would see differently: the config file and every spec.py, by mtime."""
    files = [ws.root / CONFIG_NAME, *ws.spec_files()]
    return tuple((str(f), f.stat().st_mtime_ns if f.exists() else None) for f in files)


class RecordingSandbox:
    """The shared executor as one call sees it: each workspace file the call hands a job
    (every tool names one through `workspace_path`) enters the call's code snapshot first,
    so the one place every tool already goes through records what it ran; and each job a
    cluster node ran adds that node to the call's `placements`."""

    def __init__(
        self, sandbox: "Sandbox | RayExecutor", snapshot: SnapshotRecorder, placements: list
    ):
        self._sandbox, self._snapshot, self._placements = sandbox, snapshot, placements

    async def run(self, job: "Job", progress: Any = None) -> "JobResult":
        result = await self._sandbox.run(job, progress)
        if result.placement is not None:
            self._placements.append(result.placement)
        return result

    def workspace_path(self, host_path: Path) -> str:
        where = self._sandbox.workspace_path(
            host_path
        )  # refuses what a job may not see, before we read it
        self._snapshot.add_file(host_path)
        return where

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sandbox, name)


class CallContext:
    """The ToolContext for one tool call (one experiment)."""

    def __init__(self, state: ServerState, experiment_id: str, origin: CallOrigin | None = None):
        self._state = state
        self.workspace = state.workspace
        self.experiment_id = experiment_id
        self._origin = origin or CallOrigin()
        self._mcp = self._origin.mcp_context
        self.artifacts: list[str] = []
        self.snapshot = SnapshotRecorder(state.workspace)
        self.placements: list[Placement] = []  # the cluster nodes this call's jobs ran on

    @property
    def sandbox(self) -> Sandbox:
        executor = self._state.executor
        return RecordingSandbox(executor, self.snapshot, self.placements)  # type: ignore[return-value]

    def nodes(self) -> list[dict]:
        """Where this call's jobs ran on a cluster, per node (the ledger's `nodes`); empty
        when every job ran on the server's own host."""
        by_node: dict[str, dict] = {}
        for p in self.placements:
            entry = by_node.setdefault(
                p.node_id,
                {
                    "node_id": p.node_id,
                    "address": p.address,
                    "hostname": p.hostname,
                    "device_fingerprint": p.device_fingerprint,
                    "jobs": 0,
                },
            )
            entry["jobs"] += 1
        return list(by_node.values())

    def ran_on(self, placement: Placement) -> None:
        self.placements.append(placement)

    def record_code(self, kernel: str | None, arguments: dict) -> None:
        """What the call names before any job runs: its kernel's folder, its inline code, and
        the code each role runs (its identity: kernels/code_identity.py)."""
        if isinstance(kernel, str) and kernel in self.workspace.kernels:
            self.snapshot.add_kernel(kernel, self.workspace.kernels[kernel].folder)
        for name, value in arguments.items():
            if not isinstance(value, str):
                continue
            # reference= and baseline= may instead name a file, an impl or an experiment
            if (
                name == "source"
                or name.endswith("_source")
                or (name in ("reference", "baseline") and looks_like_source(value))
            ):
                self.snapshot.add_inline(name, value)
        self.snapshot.add_ran(ran_codes(self.workspace, kernel, arguments, self.experiment))

    def code_manifest(self) -> dict:
        return self.snapshot.manifest().to_json()

    def cluster_nodes(self) -> list[dict]:
        if self._state.cluster is None:
            return []
        return [n.to_json() for n in self._state.executor.nodes()]  # type: ignore[union-attr]

    def tools_not_loaded(self) -> dict[str, str]:
        return dict(self._state.tools_not_loaded)

    def experiments(self, **filters: Any) -> list[dict]:
        """Ledger rows, newest first (filters: see Ledger.query)."""
        return self._state.ledger.query(**filters)

    def children(self, experiment_id: str) -> list[dict]:
        """The calls an experiment made (a sweep's trials), oldest first."""
        return self._state.ledger.children(experiment_id)

    async def call(
        self, tool: str, arguments: dict, progress: Progress | None = None
    ) -> CallOutcome:
        """Another tool, called as its own experiment in the ledger with this call as its parent
        (its code snapshot, artifacts and expect answer as if the agent had called it). Its progress
        goes to `progress(done, total, message)` when given, else stays inside; a failure is the
        outcome's error, not an exception."""
        from .app import execute  # app builds on this module

        if tool not in self._state.tools:
            raise AgentError(f"no tool {tool!r}; tools: {', '.join(sorted(self._state.tools))}")
        origin = CallOrigin(run=self._origin.run, parent_id=self.experiment_id, progress=progress)
        return await execute(self._state.tools[tool], self._state, dict(arguments), origin)

    async def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        if self._origin.progress is not None:
            try:
                await self._origin.progress(done, total, message)
            except Exception:  # progress is advisory, forwarded too
                pass
        if self._mcp is None:
            return
        try:
            await self._mcp.report_progress(done, total, message or None)
        except Exception:  # progress is advisory: a client that went away must not fail the call
            pass

    def artifact(self, name: str, data: bytes | str | Path, *, move: bool = False) -> str:
        target = self._artifact_path(name)
        if isinstance(data, Path) and move:
            try:
                shutil.move(data, target)
            except OSError:  # a folder this process may not write: keep a copy rather than none
                shutil.copyfile(data, target)
        elif isinstance(data, Path):
            shutil.copyfile(data, target)
        elif isinstance(data, str):
            target.write_text(data)
        else:
            target.write_bytes(data)
        return self._listed(name)

    def artifact_later(self, name: str, make: Callable[[], bytes]) -> str:
        """Like artifact(), but `make()` runs after the reply (late_artifacts.py): for plots."""
        target = self._artifact_path(name)
        self._state.late_artifacts.submit(target, make)
        return self._listed(name)

    def _artifact_path(self, name: str) -> Path:
        if not ARTIFACT_NAME.match(name) or ".." in name:
            raise ValueError(
                f"artifact name {name!r} must be a plain file name (letters, digits, . _ -)"
            )
        folder = self._state.artifacts_dir / self.experiment_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name

    def _listed(self, name: str) -> str:
        uri = f"artifact://{self.experiment_id}/{name}"
        if uri not in self.artifacts:
            self.artifacts.append(uri)
        return uri

    def experiment(self, experiment_id: str) -> dict | None:
        return self._state.ledger.get(experiment_id)

    @property
    def engines(self) -> Any:
        return self._state.engines

    def read_artifact(self, experiment_id: str, name: str) -> str | None:
        """A text artifact an earlier experiment stored, or None."""
        if not ARTIFACT_NAME.match(name) or not ARTIFACT_NAME.match(experiment_id):
            return None
        path = self._state.artifacts_dir / experiment_id / name
        self._state.late_artifacts.wait(path)
        try:
            return path.read_text()
        except (OSError, UnicodeDecodeError):
            return None
