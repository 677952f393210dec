"""The Sandbox: queue a job, run it in a fresh child of the warm zygote, return raw results.

A child is prepared before its job arrives (the spare, spawn.py): the zygote forks it,
it moves into new cgroups and confines itself. One job, in order: wait for a slot of its
kind; take the spare (and start the next); copy its inputs and write job.json into the
child's folder; tell it to run; watch it with a wall-clock timeout, output and disk caps
and progress, kill everything left in its cgroup, and judge what it left (supervise.py,
outcome.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from . import service, triton_cache
from .cgroups import CgroupManager
from .child import Child
from .errors import SandboxError
from .isolation import INSTALL_HINT, Isolation, probe
from .job import Job, JobKind, JobResult, check_input_names
from .launcher import Zygote, ZygoteDied
from .policy import Limits, SandboxView
from .service import Service
from .service_spec import ServiceSite, ServiceSpec
from .slots import DeviceLocks, Slots
from .spawn import spawn_child
from .state import prepare_state
from .supervise import Progress, supervise

__all__ = ["Sandbox", "SandboxError"]

log = logging.getLogger("infra_agent.sandbox")

KEEP_JOB_DIRS = 256  # older job folders are deleted as new jobs start
SERVICE_PORT = 8000  # a service's port in its own network namespace (any port is free there)


class Sandbox:
    def __init__(
        self,
        workspace: Path,
        state_dir: Path,
        *,
        allow_unsandboxed: bool = False,
        concurrency: dict[str, int] | None = None,
        limits: Limits | None = None,
    ):
        self.workspace = Path(workspace).resolve()
        self.state_dir = Path(state_dir).resolve()
        self.allow_unsandboxed = allow_unsandboxed
        self.limits = limits or Limits()
        gpus = sorted(str(p) for p in Path("/dev").glob("nvidia*"))
        self.num_gpus = sum(1 for g in gpus if g[len("/dev/nvidia") :].isdigit())
        self.device = "cuda" if self.num_gpus else "cpu"
        # On a multi-GPU host: a timing slot per GPU, as many run slots (at least 2); on a CPU
        # host one timing job at a time and two run jobs. Compiles never touch a device.
        sizes = {
            "timing": self.num_gpus or 1,
            "compile": 2,
            "run": max(2, self.num_gpus),
            **(concurrency or {}),
        }
        self._slots = {kind: Slots(n) for kind, n in sizes.items()}
        self._devices = DeviceLocks(self.num_gpus)  # which GPU a timing or run job is pinned to

        layout = prepare_state(self.workspace, self.state_dir, tuple(gpus) if self.num_gpus else ())
        self.cgroups = CgroupManager()
        self.cgroups.remove_stale()
        self.isolation: Isolation = probe(SandboxView(layout, sandboxed=True), self.cgroups)
        lim = self.limits
        self.isolation.details[
            "limits_per_job"
        ] = {  # what an agent's job may use (device_info shows it)
            "memory_bytes": lim.memory_bytes if self.cgroups.available else None,
            "num_processes": lim.num_processes if self.cgroups.available else None,
            "file_bytes": lim.file_bytes,
            "folder_bytes": lim.disk_bytes,
            "output_bytes": lim.output_bytes,
            "network": _network_reach(self.isolation),
        }
        self.view = SandboxView(layout, sandboxed=self.isolation.sandboxed)
        self._zygote: Zygote | None = None
        self._zygote_lock: asyncio.Lock | None = None
        self._spare: asyncio.Future | None = None  # a child forked ahead of the next job
        self._loop: asyncio.AbstractEventLoop | None = None  # the zygote's reader lives on it
        self._closed = False

    def capacity(self, kind: JobKind) -> int:
        """Jobs of `kind` that can run at once without sharing a device: one per GPU for timing
        and run jobs (one on a CPU host, where two would share its cores), the compile slots
        (at most the cores) for compiles. A sweep fans out this wide."""
        if kind == "compile":
            return min(self._slots["compile"].size, os.cpu_count() or 1)
        return max(1, self.num_gpus)

    def engines_at_once(self, resources: dict[str, float]) -> int:
        """Engines a sweep may measure side by side here: one (two would share this host's cores
        with each other and with their load generators). On a cluster: cluster.py's."""
        return 1

    def workspace_path(self, host_path: Path) -> str:
        """Where the worker sees a file of the workspace (mounted read-only)."""
        return self.view.workspace_path(host_path)

    def host_path(self, job_path: str) -> Path:
        """Where the host sees a path a running job reports (e.g. a UNIX socket it listens on)."""
        return self.view.host_path(job_path)

    async def run(self, job: Job, progress: Progress | None = None) -> JobResult:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if not self.isolation.sandboxed and not self.allow_unsandboxed:
            raise SandboxError(
                f"refusing to run agent code without isolation ({self.isolation.missing.get('bwrap')})"
            )
        if job.kind not in self._slots:
            raise SandboxError(
                f"unknown job kind {job.kind!r}; use one of {', '.join(self._slots)}"
            )
        self._follow_loop()
        queued_from = time.monotonic()
        async with self._slots[job.kind].slot(progress), self._pinned_env(job) as env:
            queued_s = time.monotonic() - queued_from
            result = await self._run_now(job, env, progress)
            result.queued_s = queued_s
            return result

    @asynccontextmanager
    async def _pinned_env(self, job: Job) -> AsyncIterator[dict[str, str]]:
        """The job's environment, pinned to one GPU on a GPU host while it runs (DeviceLocks);
        compiles, CPU hosts and a job that names its devices itself are not pinned."""
        if not self.num_gpus or job.kind == "compile" or "CUDA_VISIBLE_DEVICES" in job.env:
            yield dict(job.env)
            return
        async with self._devices.hold(exclusive=job.kind == "timing") as gpu:
            yield {**job.env, "CUDA_VISIBLE_DEVICES": str(gpu)}

    # --- services (service.py): long-running, confined like jobs --------------------------

    def service_site(self, name: str) -> ServiceSite:
        """Where a service named `name` will see things: build its spec's argv and env from it."""
        sandboxed = self.view.sandboxed
        return ServiceSite(
            sandboxed=sandboxed,
            python=self.view.layout.python,
            folder=self.view.job_dir(name),
            port=SERVICE_PORT if sandboxed else free_port(),
        )

    def remove_stale_services(self) -> int:
        """Remove the folders of services a previous server started (they died with it)."""
        return service.sweep_stale(self.view.layout.jobs_dir)

    async def start_service(self, spec: ServiceSpec) -> Service:
        """Start `spec` in its own bubblewrap and cgroup, its host confined before it starts
        the service; returns at once (readiness is the caller's: it knows the protocol)."""
        if not self.isolation.sandboxed and not self.allow_unsandboxed:
            raise SandboxError(
                f"refusing to start a service without isolation "
                f"({self.isolation.missing.get('bwrap')})"
            )
        return service.start(
            spec,
            view=self.view,
            cgroups=self.cgroups,
            isolation=self.isolation,
            limits=self.limits,
            device=self.device,
            masked=(self.state_dir,),
        )

    def _follow_loop(self) -> None:
        """Used from a new event loop (a test runner's, a restarted server's): what belonged
        to the old one (zygote reader, spare, lock, queues) cannot be awaited here; start over."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None:
            if self._zygote is not None:
                self._zygote.terminate()  # its children (the spare too) die with it
                self._zygote = None
            self._spare, self._zygote_lock = None, None
            self._slots = {kind: Slots(slots.size) for kind, slots in self._slots.items()}
            self._devices = DeviceLocks(self.num_gpus)
        self._loop = loop

    async def _ensure_zygote(self) -> Zygote:
        if self._zygote_lock is None:
            self._zygote_lock = asyncio.Lock()
        async with self._zygote_lock:
            if self._zygote is None or not self._zygote.alive:
                if self._zygote is not None:
                    self._zygote.terminate()
                try:
                    self._zygote = await Zygote.start(self.view, self.state_dir / "zygote.log")
                except ZygoteDied as exc:
                    raise SandboxError(
                        f"{exc}\n(if bwrap is the problem: {INSTALL_HINT})"
                    ) from None
                self._check_zygote_layers(self._zygote.ready)
            return self._zygote

    def _check_zygote_layers(self, ready: dict) -> None:
        """What the parent probed must hold inside the sandbox too: no silent downgrade."""
        problems = []
        if "landlock" in self.isolation.layers and not ready.get("landlock_abi"):
            problems.append("Landlock is not available inside the sandbox")
        if "seccomp" in self.isolation.layers and ready.get("seccomp_error"):
            problems.append(f"seccomp inside the sandbox: {ready['seccomp_error']}")
        if problems:
            self._zygote.terminate()
            raise SandboxError("; ".join(problems))

    async def _prepare_child(self) -> Child:
        """A fresh child of the zygote, in its own new cgroups and job folder, confined, waiting for a job."""
        zygote = await self._ensure_zygote()
        self._prune_job_dirs()
        return await spawn_child(zygote, self.view, self.cgroups, self.limits, self.isolation)

    async def _take_child(self) -> Child:
        """The spare child if it is still good, else a new one; then start the next spare."""
        spare, self._spare = self._spare, None
        child = None
        if spare is not None:
            try:
                child = await spare
            except asyncio.CancelledError:
                child = None
            except SandboxError as exc:  # replaced below; said, so a pattern can be seen
                log.warning("a spare job child was replaced: %s", str(exc).splitlines()[0])
                child = None
            if child is not None and not child.usable:
                child.discard()
                child = None
        if child is None:
            child = await self._prepare_child()
        if not self._closed:
            self._spare = asyncio.ensure_future(self._prepare_child())
            self._spare.add_done_callback(
                lambda t: t.cancelled() or t.exception()
            )  # retrieved later
        return child

    async def _run_now(self, job: Job, env: dict[str, str], progress: Progress | None) -> JobResult:
        check_input_names(job)
        for _ in range(3):  # a spare that died idle (its zygote restarted) is replaced, not blamed
            child = await self._take_child()
            try:
                for name, src in job.inputs.items():
                    copy = shutil.copytree if Path(src).is_dir() else shutil.copyfile
                    try:
                        copy(src, child.host_dir / "in" / name)
                    except OSError as exc:
                        raise SandboxError(
                            f"cannot copy input {name!r} from {src}: {exc}"
                        ) from None
                seeded = self._seed_triton_cache(job, child)
                spec = self.view.job_spec(
                    job_id=child.job_id,
                    op=job.op,
                    payload=job.payload,
                    env=env,
                    device=self.device,
                    limits=self.limits,
                    timeout_s=job.timeout_s,
                )
                (child.host_dir / "job.json").write_text(json.dumps(spec))
                child.sock.send(b'{"run": true}')
            except OSError:
                child.discard()
                continue
            except BaseException:
                child.discard()
                raise
            child.used = True
            try:
                result = await supervise(child, job, self.limits, progress)
                result.num_compiles = self._keep_triton_cache(job, child, seeded)
                return result
            finally:
                child.discard()
        raise SandboxError(
            f"job children keep dying before they start; zygote log:\n{self._zygote_log_tail()}"
        )

    def _seed_triton_cache(self, job: Job, child: Child) -> set[str]:
        if job.triton_cache is None:
            return set()
        return triton_cache.seed(
            self.state_dir / "triton-cache", job.triton_cache, child.host_dir / "cache/triton"
        )

    def _keep_triton_cache(self, job: Job, child: Child, seeded: set[str]) -> int:
        cache = child.host_dir / "cache/triton"
        if job.triton_cache is None:  # counted, not kept
            return (
                sum(1 for e in cache.iterdir() if not e.name.startswith("."))
                if cache.is_dir()
                else 0
            )
        return triton_cache.keep(self.state_dir / "triton-cache", job.triton_cache, cache, seeded)

    def _zygote_log_tail(self) -> str:
        return self._zygote.log_tail() if self._zygote is not None else ""

    def _prune_job_dirs(self) -> None:
        prune_oldest(self.view.layout.jobs_dir, KEEP_JOB_DIRS)

    def zygote_pids(self) -> list[int]:
        """Host pids of the zygote's process tree (empty when none runs): for tests and ops."""
        return self._zygote.host_pids() if self._zygote is not None and self._zygote.alive else []

    async def aclose(self) -> None:
        self._closed = True
        if self._spare is not None:
            spare, self._spare = self._spare, None
            spare.cancel()
            try:
                (await spare).discard()
            except BaseException:  # noqa: BLE001 - cancelled or failed: nothing to discard
                pass
        if self._zygote is not None:
            self._zygote.terminate()
            self._zygote = None
        self.cgroups.close()


def prune_oldest(folder: Path, keep: int) -> None:
    """Delete all but the `keep` newest entries of `folder` (named so that they sort by age)."""
    for old in sorted(folder.iterdir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _network_reach(isolation: Isolation) -> str:
    """What a job can reach over the network, in words."""
    if isolation.sandboxed:
        return "none (no network namespace route; only UNIX sockets)"
    if "seccomp" in isolation.layers:
        return "UNIX sockets only"
    return "unrestricted"
