"""The Ray executor: the jobs of every tool placed on the nodes of a Ray cluster.

    cluster = RayExecutor(local_sandbox, "auto", node=NodeConfig(...))
    res = await cluster.run(Job(op="noop"))     # the same call, the same JobResult as Sandbox.run
    res.placement                                # which node ran it, with its device fingerprint
    cluster.nodes()                              # device_info's view: nodes, resources, free
    await cluster.aclose()

Ray places each job (a task with the job's resources, spread over the nodes), accounts
its slots and gives a GPU job its GPU; we never schedule, we only say what a job needs. A job
streams its progress lines back as it runs (a Ray streaming generator), and one whose node
dies is started once more on an eligible node (every job is idempotent: it writes only its
own folder); that retry is ours, as Ray replays a streaming task only when it yields the same
number of items again. What stays on the server: the judge (the tool that reads the
result), the ledger, the code snapshots, and the jobs the server watches from outside
(`Job.host_bound`: profile's samplers), which run on the local sandbox. Engines are not
jobs: one launched without `resources=` runs in the local sandbox, on the server's host; one
launched with `resources=` runs on a node that has them (serving/remote.py, on this executor's
Ray), with its load generator.

Ray leaves a task that no live node can ever run pending forever; here a job whose resources
no live node has is refused before it is sent, and one waiting when the last such node dies
is cancelled and fails with that reason.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .errors import SandboxError
from .isolation import Isolation
from .job import Job, JobKind, JobResult
from .mirror import WorkspaceMirror
from .node import (
    JobWire,
    NodeConfig,
    NodeProgress,
    ResultWire,
    WorkspaceVersion,
    run_on_node,
    untar_folder,
)
from .policy import WORKSPACE_MOUNT, Limits
from .runner import KEEP_JOB_DIRS, Sandbox, prune_oldest
from .streams import Progress, report

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'ray[default]==2.60.0' (on the server and on every node)"
FEASIBILITY_CHECK_S = 2.0  # how often a waiting job checks that a live node can still run it
LIVE_NODES_TTL_S = 1.0  # a new job trusts Ray's list of live nodes this long


@dataclass(frozen=True)
class NodeView:
    """One node of the cluster as device_info shows it."""

    node_id: str
    address: str
    alive: bool
    resources: dict[str, float]  # what the node has (CPU, GPU, memory bytes, custom)
    free: dict[str, float]  # what is free now

    def to_json(self) -> dict:
        return asdict(self)


class RayExecutor:
    """Same interface as Sandbox for jobs (run, workspace_path, device, limits, isolation)."""

    def __init__(
        self,
        local: Sandbox,
        address: str,
        *,
        node: NodeConfig,
        resources: dict[str, dict[str, float]] | None = None,
        retries: int = 1,
    ):
        try:
            import ray
        except ImportError:
            raise SandboxError(f"--cluster needs Ray: {INSTALL_HINT}") from None
        self._ray = ray
        self.local = local
        self.address = address
        self.retries = retries
        self._node = node
        self._owns_ray = not ray.is_initialized()  # a driver that joined first keeps it
        if self._owns_ray:
            try:
                # nothing on stdout (a stdio MCP server's channel); the nodes' logs stay on the nodes
                ray.init(
                    address=address,
                    namespace=f"infra-agent-{node.session}",
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    include_dashboard=False,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise SandboxError(
                    f"cannot join the Ray cluster at {address!r} ({exc}); start one with "
                    "`ray start --head` on the head node, or pass its address (HOST:PORT)"
                ) from None
        _errors_to_stderr(ray)
        self._task = ray.remote(run_on_node)
        self._tasks: dict[tuple, Any] = {}  # resources -> the task with their options
        self._live: dict[str, dict[str, float]] = {}
        self._live_at = -1e9
        live = self._live_nodes(fresh=True).values()
        self.device = "cuda" if any(r.get("GPU") for r in live) else "cpu"
        default = {"GPU": 1.0} if self.device == "cuda" else {"CPU": 1.0}
        self.resources: dict[str, dict[str, float]] = {
            "compile": {"CPU": 1.0},
            "run": dict(default),
            "timing": dict(default),
            **(resources or {}),
        }
        self._mirror = WorkspaceMirror(local.workspace, local.view.layout.workspace_hidden)
        self._num_results = 0
        self._results_dir = local.state_dir / "cluster-jobs"
        self._results_dir.mkdir(parents=True, exist_ok=True)

    # --- what tools see (tools/base.py's Sandbox protocol) ----------------------------------

    @property
    def limits(self) -> Limits:
        return self._node.limits

    @property
    def isolation(self) -> Isolation:
        return self.local.isolation

    def workspace_path(self, host_path: Path) -> str:
        """Where a job sees a workspace file: nodes are always sandboxed, so /workspace/<rel>."""
        local = self.local.workspace_path(host_path)  # refuses what no job may see
        if self.local.view.sandboxed:
            return local
        rel = Path(host_path).resolve().relative_to(self.local.workspace)
        return str(Path(WORKSPACE_MOUNT) / rel)

    def host_path(self, job_path: str) -> Path:
        return self.local.host_path(job_path)

    def capacity(self, kind: JobKind) -> int:
        """Jobs of `kind` the live nodes can run at once, from their resources (a 2-GPU node and
        an 8-GPU node: 10 timing jobs); at least 1."""
        return self.engines_at_once(self.resources[kind])

    def engines_at_once(self, resources: dict[str, float]) -> int:
        """How many holders of `resources` (engines, jobs) the live nodes fit at once; at least 1."""
        need = {k: v for k, v in resources.items() if v > 0}
        return max(
            1,
            sum(
                int(min(total.get(k, 0.0) / v for k, v in need.items())) if need else 1
                for total in self._live_nodes(fresh=False).values()
            ),
        )

    def zygote_pids(self) -> list[int]:
        return self.local.zygote_pids()

    # --- jobs ---------------------------------------------------------------------------------

    async def run(self, job: Job, progress: Progress | None = None) -> JobResult:
        if job.host_bound:
            return await self.local.run(job, progress)
        resources = dict(job.resources or self.resources[job.kind])
        wire = JobWire.pack(job)
        for attempt in range(self.retries + 1):
            self._check_feasible(resources, job.node)
            workspace = await asyncio.to_thread(self._mirror.version, self._ray)
            try:
                return await self._run_once(wire, workspace, resources, job.node, progress)
            except _NodeDied as died:
                if attempt == self.retries or job.node is not None:  # pinned: nowhere else
                    raise SandboxError(_node_failure(died.cause, self.retries)) from None
                log.warning(
                    "a job's node failed (%s); starting it again (attempt %d of %d)",
                    first_line(died.cause),
                    attempt + 2,
                    self.retries + 1,
                )
                await report(progress, 0.0, None, "its node failed; starting it again")
        raise AssertionError("unreachable")

    async def _run_once(
        self,
        wire: JobWire,
        workspace: WorkspaceVersion,
        resources: dict[str, float],
        node: str | None,
        progress: Progress | None,
    ) -> JobResult:
        """One start of the job on a node: its progress lines relayed as they come, its result
        unpacked. Ray's own retry is off: it replays a streaming task expecting the same number
        of items, and a job's progress lines are not (run() starts it again instead)."""
        stream = self._task_for(resources, node).remote(wire, workspace, self._node)
        sent = time.monotonic()
        await report(
            progress, 0.0, None, f"sent to the cluster (needs {resource_words(resources)})"
        )
        try:
            future = asyncio.ensure_future(relay(stream, progress))
            future.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved
            while True:
                done, _ = await asyncio.wait({future}, timeout=FEASIBILITY_CHECK_S)
                if done:
                    wire_back = future.result()
                    break
                try:
                    self._check_feasible(resources, node, fresh=True)
                except SandboxError:
                    self._ray.cancel(stream, force=True)
                    raise
        except asyncio.CancelledError:
            self._ray.cancel(stream, force=True)  # the worker dies, and its zygote and job with it
            raise
        except self._ray.exceptions.RayTaskError as exc:  # raised by our code on the node
            cause = exc.cause if isinstance(exc.cause, Exception) else exc
            raise SandboxError(str(cause)) from None
        except (
            self._ray.exceptions.WorkerCrashedError,
            self._ray.exceptions.NodeDiedError,
            self._ray.exceptions.ObjectLostError,
        ) as exc:  # the node or its worker died: the job can start again elsewhere
            raise _NodeDied(exc) from None
        except self._ray.exceptions.RayError as exc:  # Ray failed otherwise
            raise SandboxError(
                f"Ray could not run the job ({first_line(exc)}); look at device_info's "
                "cluster view, then call again"
            ) from None
        return self._unpack(wire_back, time.monotonic() - sent)

    # --- actors: what lives on a node between calls (an engine) ------------------------------

    async def start_actor(self, cls: type, resources: dict[str, float], *args: Any) -> Any:
        """An actor of `cls` on a node that has `resources` (held for the actor's life; a node's
        death ends it, Ray never restarts it), made with `cls(NodeConfig, WorkspaceVersion,
        *args)`: its node's sandbox, and the workspace as it is now."""
        self._check_feasible(resources)
        workspace = await asyncio.to_thread(self._mirror.version, self._ray)
        return (
            self._ray.remote(cls)
            .options(
                **_ray_options(resources),
                max_restarts=0,
                max_concurrency=16,  # its requests and its load runs at once (an async actor)
                scheduling_strategy="SPREAD",
            )
            .remote(self._node, workspace, *args)
        )

    def _task_for(self, resources: dict[str, float], node: str | None = None) -> Any:
        """The node task with a job's resources (and its node, when pinned to one), made once
        per kind (Ray's `.options()` costs ~0.1 ms a call)."""
        key = (tuple(sorted(resources.items())), node)
        task = self._tasks.get(key)
        if task is None:
            if node is None:
                strategy: Any = "SPREAD"
            else:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
            task = self._tasks[key] = self._task.options(
                **_ray_options(resources),
                num_returns="streaming",
                max_retries=0,
                scheduling_strategy=strategy,
            )
        return task

    def _unpack(self, wire: ResultWire, elapsed_s: float) -> JobResult:
        result = wire.result
        if wire.out_tar is not None:
            folder = self._results_dir / f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
            if wire.out_tar:
                untar_folder(wire.out_tar, folder / "out")
            else:  # the job wrote nothing into out/
                (folder / "out").mkdir(parents=True)
            result = replace(result, out_dir=folder / "out")
            self._num_results += 1
            if self._num_results % 32 == 0:
                prune_oldest(self._results_dir, KEEP_JOB_DIRS)
        # queued: from sending to the job's start on its node (placement, transfer, a worker)
        return replace(result, queued_s=max(0.0, elapsed_s - result.wall_s))

    def _check_feasible(
        self, resources: dict[str, float], node: str | None = None, fresh: bool = False
    ) -> None:
        """Refuse what no live node has (Ray would leave it pending forever), and a job pinned
        to a node that is not alive or lacks its resources."""
        live = self._live_nodes(fresh)
        if node is not None:
            live = {k: r for k, r in live.items() if k.endswith(f"({node[:12]})")}
            if not live:
                raise SandboxError(
                    f"the job must run on node {node[:12]}, which is not alive now; look at "
                    "device_info's cluster view, then call again"
                )
        if any(all(n.get(k, 0.0) >= v for k, v in resources.items()) for n in live.values()):
            return
        have = "; ".join(f"{a} {resource_words(r)}" for a, r in live.items()) or "no live node"
        raise SandboxError(
            f"no live node of the cluster has {resource_words(resources)} (nodes: {have}); "
            "add such a node, or ask for what the cluster has"
        )

    def _live_nodes(self, fresh: bool) -> dict[str, dict[str, float]]:
        """Live nodes' totals by "address (node id)", asked of Ray at most once a second."""
        now = time.monotonic()
        if fresh or now - self._live_at > LIVE_NODES_TTL_S:
            self._live = {
                f"{n['NodeManagerAddress']} ({n['NodeID'][:12]})": n["Resources"]
                for n in self._ray.nodes()
                if n["Alive"]
            }
            self._live_at = now
        return self._live

    def nodes(self) -> list[NodeView]:
        """Every node Ray knows, with what it has and what is free now."""
        free = _available_per_node(self._ray)
        return [
            NodeView(
                node_id=n["NodeID"],
                address=n["NodeManagerAddress"],
                alive=bool(n["Alive"]),
                resources={k: v for k, v in n["Resources"].items() if not k.startswith("node:")},
                free=free.get(n["NodeID"], {}),
            )
            for n in self._ray.nodes()
        ]

    async def aclose(self) -> None:
        if self._owns_ray and self._ray.is_initialized():
            await asyncio.to_thread(self._ray.shutdown)


def _errors_to_stderr(ray: Any) -> None:
    """Ray's driver prints the cluster's errors (a node died, a task will be retried) to stdout,
    from a thread of its own; this process's stdout is a protocol (stdio MCP) or a command's JSON
    (`infra-agent call --json`). Send them to stderr: Ray's printer with its stream chosen."""
    worker: Any = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(worker, "print_to_stdstream", None)
    if original is None or getattr(original, "to_stderr", False):
        return

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


# Ray starts its workers at nice 15 unless told otherwise, and everything a worker starts inherits
# it: an engine on a node ran at nice 15 (its sandbox only ever lowers priority), and beside two
# busy processes on 2 cores it got ~2% of a CPU and never answered /health in 300 s. Node workers
# run at the raylet's own priority, as Ray's job supervisor asks for itself; the sandbox then lowers
# an engine's to ServiceSpec.nice, as it does on the server's host.
_WORKER_ENV = {"env_vars": {"RAY_worker_niceness": "0"}}


def _ray_options(resources: dict[str, float]) -> dict:
    rest = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    return {
        "num_cpus": resources.get("CPU", 0.0),
        "num_gpus": resources.get("GPU", 0.0),
        "runtime_env": _WORKER_ENV,
        **({"resources": rest} if rest else {}),
    }


class _NodeDied(Exception):
    def __init__(self, cause: Exception):
        self.cause = cause


async def relay(stream: Any, progress: Progress | None) -> Any:
    """A node's streamed items in order (a job's, an engine's load run): each NodeProgress to
    `progress`, then the first other item, the result, returned."""
    async for ref in stream:
        item = await ref
        if not isinstance(item, NodeProgress):
            return item
        await report(progress, item.done, item.total, item.message)
    raise SandboxError("the node ended its stream without a result; call again")


def _available_per_node(ray: Any) -> dict[str, dict[str, float]]:
    try:
        from ray._private.state import available_resources_per_node  # public: totals only

        per_node = available_resources_per_node()
    except Exception:  # noqa: BLE001 - an internal API: without it "available" is unknown
        return {}
    return {
        node: {k: v for k, v in free.items() if not k.startswith("node:")}
        for node, free in per_node.items()
    }


def resource_words(resources: dict[str, float]) -> str:
    """Resources in words: "GPU=1, accelerator_type:H200=0.001"."""
    shown = {k: v for k, v in resources.items() if k not in ("memory", "object_store_memory")}
    return ", ".join(f"{k}={v:g}" for k, v in sorted(shown.items())) or "nothing"


def first_line(exc: BaseException) -> str:
    """An exception as its type and its first line, for messages."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:400] if text else ''}"


def _node_failure(exc: Exception, retries: int) -> str:
    return (
        f"the job's node failed ({first_line(exc)}); it was started {retries + 1} time(s), "
        "on another eligible node after a node died. Look at device_info's cluster view for "
        "the nodes alive now, then call again"
    )


def default_base_dir() -> str:
    return str(Path(tempfile.gettempdir()) / "infra-agent-nodes")


__all__ = [
    "NodeConfig",
    "NodeView",
    "RayExecutor",
    "default_base_dir",
    "first_line",
    "relay",
    "resource_words",
]
