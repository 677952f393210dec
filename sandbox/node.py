"""The node side of the Ray executor (cluster.py): a warm Sandbox in each Ray worker process.

The server never runs agents' code on a node by itself: it sends a Ray task, `run_on_node`,
which the node's Ray worker runs with this module. The argument, step by step:

1. The task carries data only: the job (its op, payload, env, limits), its input files as
   bytes, and the workspace's manifest (path -> sha256, and a Ray object holding each file's
   bytes). Nothing in it is executed outside the sandbox.
2. The worker process holds one `Sandbox` for its lifetime (made on its first task): the same
   class the server runs locally, with its probed layers (bwrap namespaces around a warm
   zygote, Landlock, seccomp, rlimits, cgroups). A node whose sandbox is not complete refuses
   every job: agents' code never runs on a node with less isolation than `Sandbox` demands,
   and `allow_unsandboxed` does not reach a cluster.
3. The workspace the sandbox mounts read-only is this worker's own copy, brought to the
   manifest before each job: only files whose hash changed are fetched (Ray's object store
   keeps a fetched file on the node for the next worker). The job sees the workspace as it
   was when the server sent the task, as a local job sees the live one.
4. What comes back is raw: the job's progress lines as it runs (`NodeProgress`, the task being
   a Ray streaming generator), then the JobResult's fields and a tar of the job's out/ folder,
   which the server unpacks with tarfile's "data" filter and judges; a node holds no ledger, no
   snapshots and no verdicts.

Ray accounts the resources a job asked for (a task holds them while it runs: this worker
blocks on the job, not in `ray.get`, so Ray cannot hand them out twice) and gives a GPU job
its GPU ids, which become the job's CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import asyncio
import glob
import io
import os
import platform
import queue
import shutil
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import SandboxError
from .job import Job, JobResult, Placement, check_input_names
from .policy import Limits

RESULT_TAR_LIMIT = 1 << 30  # bytes of a job's out/ folder shipped back; more fails the job


@dataclass(frozen=True)
class NodeConfig:
    """What every node's sandbox is made with (the same on every node of one server)."""

    base_dir: str  # where a worker keeps its workspace copy and sandbox state, per node and pid
    session: str  # the server's session id: two servers on one cluster never share folders
    limits: Limits
    device_facts: Callable[[], dict]  # tools/common/provenance.device_facts, by reference
    fingerprint: Callable[[dict], str]


@dataclass(frozen=True)
class ManifestEntry:
    sha256: str
    mode: int  # permission bits (an executable script stays executable)
    blob: Any  # the Ray ObjectRef of the file's bytes


@dataclass
class JobWire:
    """A Job as it travels to a node: input files as bytes (folders as tar)."""

    job: Job
    files: dict[str, bytes] = field(default_factory=dict)
    folders: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def pack(cls, job: Job) -> "JobWire":
        check_input_names(job)  # before the node writes them into its folder
        wire = cls(replace(job, inputs={}))
        for name, src in job.inputs.items():
            src = Path(src)
            if src.is_dir():
                wire.folders[name] = tar_folder(src)
            else:
                try:
                    wire.files[name] = src.read_bytes()
                except OSError as exc:
                    raise SandboxError(f"cannot read input {name!r} from {src}: {exc}") from None
        return wire

    def unpack(self, folder: Path) -> dict[str, Path]:
        """The inputs as files and folders under `folder`, by name (what Job.inputs holds)."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in self.files.items():
            (folder / name).write_bytes(data)
        for name, data in self.folders.items():
            untar_folder(data, folder / name)
        return {name: folder / name for name in [*self.files, *self.folders]}


@dataclass
class ResultWire:
    """A JobResult as it travels back: out/ as a tar."""

    result: JobResult  # out_dir is None here
    out_tar: bytes | None  # None: the job had no out/ folder; b"": an empty one


@dataclass(frozen=True)
class NodeProgress:
    """A progress line of the running job (streams.Progress's arguments), sent as it comes."""

    done: float
    total: float | None
    message: str


@dataclass(frozen=True)
class WorkspaceVersion:
    """The workspace as the server saw it when it sent a job: a hash over every (path, sha256),
    and the Ray object of its manifest, fetched by a node only when it has not synced this
    version yet (held in a list so Ray does not resolve it for every task)."""

    digest: str
    manifest: list  # [ObjectRef of dict[str, ManifestEntry]]


def run_on_node(
    wire: JobWire, workspace: WorkspaceVersion, config: NodeConfig
) -> Iterator[NodeProgress | ResultWire]:
    """The Ray task's body (cluster.py runs it as a streaming generator): the job's progress
    lines, then its result, last."""
    yield from _host(config).run(wire, workspace)


_HOST: "NodeHost | None" = None
_HOST_LOCK = threading.Lock()


def _host(config: NodeConfig) -> "NodeHost":
    global _HOST
    with _HOST_LOCK:
        if _HOST is None or _HOST.config != config:
            if _HOST is not None:
                _HOST.close()
            _HOST = NodeHost(config)
        return _HOST


class NodeHost:
    """One Ray worker's sandbox, its event loop (the zygote dies with the thread that
    started it, so the loop lives as long as the process) and its workspace copy."""

    def __init__(self, config: NodeConfig):
        import ray  # only ever imported in a Ray worker

        from .runner import Sandbox

        self.config = config
        self.node_id = ray.get_runtime_context().get_node_id()
        _remove_dead_workers_folders(Path(config.base_dir))
        worker = f"{platform.node()}-{self.node_id[:12]}-{os.getpid()}"
        root = Path(config.base_dir) / config.session / worker
        self.workspace, self.inputs = root / "ws", root / "inputs"
        for d in (self.workspace, self.inputs):
            d.mkdir(parents=True, exist_ok=True)
        self.synced: dict[str, str] = {}  # workspace path -> sha256 of what is on disk
        self.version = ""  # the WorkspaceVersion digest on disk
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="node-sandbox", daemon=True).start()
        # Ray accounts slots; this sandbox runs the one job its worker was given at a time
        self.sandbox = Sandbox(self.workspace, root / "state", limits=config.limits)
        facts = dict(config.device_facts())
        self.placement = Placement(
            node_id=self.node_id,
            address=ray.util.get_node_ip_address(),
            hostname=platform.node(),
            device_fingerprint=config.fingerprint(facts),
        )

    def run(
        self, wire: JobWire, workspace: WorkspaceVersion
    ) -> Iterator[NodeProgress | ResultWire]:
        import ray

        self.prepare(workspace)
        inputs = self.inputs / f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
        job = replace(wire.job, inputs=wire.unpack(inputs))
        gpu_ids = tuple(str(g) for g in ray.get_gpu_ids())
        if gpu_ids:
            job = replace(job, env={**job.env, "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids)})
        lines: queue.SimpleQueue[NodeProgress | None] = queue.SimpleQueue()  # None: finished

        async def progress(done: float, total: float | None, message: str) -> None:
            lines.put(NodeProgress(done, total, message))

        future = asyncio.run_coroutine_threadsafe(self.sandbox.run(job, progress), self.loop)
        future.add_done_callback(lambda _: lines.put(None))
        try:
            while True:  # short waits: a cancel (KeyboardInterrupt) lands between them
                try:
                    line = lines.get(timeout=0.25)
                except queue.Empty:
                    continue
                if line is None:
                    break
                yield line
            result = future.result()
        except BaseException:  # a cancel, or the server dropped the stream (GeneratorExit)
            future.cancel()  # the sandbox kills the job and everything in its cgroup
            raise
        finally:
            shutil.rmtree(inputs, ignore_errors=True)
        out_tar = None
        if result.out_dir is not None and result.out_dir.is_dir():
            empty = next(result.out_dir.iterdir(), None) is None
            out_tar = b"" if empty else tar_folder(result.out_dir, limit=RESULT_TAR_LIMIT)
        placement = replace(self.placement, gpu_ids=gpu_ids)
        yield ResultWire(replace(result, out_dir=None, placement=placement), out_tar)

    def prepare(self, workspace: WorkspaceVersion) -> None:
        """Before agents' code runs here (a job, an engine): refuse without a complete sandbox,
        bring the workspace copy to the version the server sent."""
        import ray

        if not self.sandbox.isolation.sandboxed:
            raise SandboxError(
                f"node {self.placement.address} ({self.node_id[:12]}) runs no sandbox "
                f"({self.sandbox.isolation.missing.get('bwrap')}): install bubblewrap there; "
                "a cluster node never runs agents' code unsandboxed"
            )
        if workspace.digest != self.version:
            self._sync(ray.get(workspace.manifest[0]))
            self.version = workspace.digest

    def _sync(self, manifest: dict[str, ManifestEntry]) -> None:
        """Bring the workspace copy to the manifest: fetch what changed, drop what is gone."""
        import ray

        stale = [rel for rel, entry in manifest.items() if self.synced.get(rel) != entry.sha256]
        blobs = ray.get([manifest[rel].blob for rel in stale]) if stale else []
        for rel, data in zip(stale, blobs):
            path = self.workspace / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
            tmp.write_bytes(data)
            tmp.chmod(manifest[rel].mode)
            tmp.replace(path)  # a job reading the old file sees it whole, never a torn one
            self.synced[rel] = manifest[rel].sha256
        for rel in [r for r in self.synced if r not in manifest]:
            (self.workspace / rel).unlink(missing_ok=True)
            del self.synced[rel]

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.sandbox.aclose(), self.loop).result(30)


def _remove_dead_workers_folders(base: Path) -> None:
    """What earlier Ray workers on this host left (any server's session, any raylet): a worker's
    folder is <base>/<session>/<host>-<node id>-<pid>, and one of this host whose process is gone
    is removed with its copy of the workspace and its job folders (`base` may be shared by hosts),
    and a session folder left empty with it. Workers starting together sweep at once, so a folder
    may vanish mid-walk: the glob module skips it (Path.glob in 3.11 raises FileNotFoundError)."""
    pattern = os.path.join(glob.escape(str(base)), "*", f"{glob.escape(platform.node())}-*-*")
    for folder in map(Path, glob.glob(pattern)):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)
            try:  # only if empty: a live worker of the session (any host) keeps it
                folder.parent.rmdir()
            except OSError:
                pass


def tar_folder(folder: Path, limit: int | None = None) -> bytes:
    """A folder as an uncompressed tar (relative names); over `limit` bytes raises SandboxError."""
    if limit is not None:
        size = sum(
            p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
        )
        if size > limit:
            raise SandboxError(
                f"the job's output folder holds {size / 2**20:.0f} MiB, more than the "
                f"{limit / 2**20:.0f} MiB a node sends back; write less into out/"
            )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def untar_folder(data: bytes, dest: Path) -> None:
    """Unpack what `tar_folder` made; the "data" filter refuses absolute paths, `..`, links
    that leave `dest` and device files (the tar of a job's out/ is untrusted)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter="data")
