"""The Sandbox: queue a job, run it in a fresh child of the warm zygote, return raw results.

A child is prepared before its job arrives (the spare): the zygote forks it with the
job's stdout/stderr pipes and its own socket; it says hello (the kernel stamps its pid)
and we move it into new cgroups. One job, in order: wait for a slot of its kind; take
the spare (and start the next); make the job's folder (in/, out/, home, caches) and
job.json; send the child its folder; it confines itself and says which layers hold;
watch it with a wall-clock timeout, output and disk caps, and progress; kill everything
left in its cgroup; judge what it left (outcome.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import Awaitable, Callable

from . import outcome
from .cgroups import CgroupError, CgroupManager
from .child import Child, json_or_empty, recv, wait_done
from .isolation import INSTALL_HINT, Isolation, probe
from .job import Job, JobResult
from .launcher import Zygote, ZygoteDied
from .policy import Limits, SandboxView
from .slots import Slots
from .state import prepare_state
from .streams import Capture, DiskWatch, ProgressTail

Progress = Callable[[float, "float | None", str], Awaitable[None]]
KEEP_JOB_DIRS = 256  # older job folders are deleted as new jobs start


class SandboxError(Exception):
    """The sandbox itself failed or refused (not the agent's code): the message says what to do."""


class Sandbox:
    def __init__(self, workspace: Path, state_dir: Path, *, allow_unsandboxed: bool = False,
                 concurrency: dict[str, int] | None = None, limits: Limits | None = None):
        self.workspace = Path(workspace).resolve()
        self.state_dir = Path(state_dir).resolve()
        self.allow_unsandboxed = allow_unsandboxed
        self.limits = limits or Limits()
        gpus = sorted(str(p) for p in Path("/dev").glob("nvidia*"))
        self.num_gpus = sum(1 for g in gpus if g[len("/dev/nvidia"):].isdigit())
        self.device = "cuda" if self.num_gpus else "cpu"
        sizes = {"timing": self.num_gpus or 1, "compile": 2, "run": 2, **(concurrency or {})}
        self._slots = {kind: Slots(n) for kind, n in sizes.items()}

        layout = prepare_state(self.workspace, self.state_dir, tuple(gpus) if self.num_gpus else ())
        self.cgroups = CgroupManager()
        self.cgroups.remove_stale()
        self.isolation: Isolation = probe(SandboxView(layout, sandboxed=True), self.cgroups)
        lim = self.limits
        self.isolation.details["limits_per_job"] = {  # what an agent's job may use (device_info shows it)
            "memory_bytes": lim.memory_bytes if self.cgroups.available else None,
            "num_processes": lim.num_processes if self.cgroups.available else None,
            "file_bytes": lim.file_bytes, "folder_bytes": lim.disk_bytes, "output_bytes": lim.output_bytes,
            "network": "none (no network namespace route; only UNIX sockets)" if self.isolation.sandboxed
            else "UNIX sockets only" if "seccomp" in self.isolation.layers else "unrestricted"}
        self.view = SandboxView(layout, sandboxed=self.isolation.sandboxed)
        self._zygote: Zygote | None = None
        self._zygote_lock: asyncio.Lock | None = None
        self._spare: asyncio.Future | None = None  # a child forked ahead of the next job
        self._loop: asyncio.AbstractEventLoop | None = None  # the zygote's reader lives on it
        self._closed = False

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
            raise SandboxError(f"refusing to run agent code without isolation ({self.isolation.missing.get('bwrap')})")
        if job.kind not in self._slots:
            raise SandboxError(f"unknown job kind {job.kind!r}; use one of {', '.join(self._slots)}")
        self._follow_loop()
        queued_from = time.monotonic()
        async with self._slots[job.kind].slot(progress) as index:
            queued_s = time.monotonic() - queued_from
            env = dict(job.env)
            if self.device == "cuda" and job.kind == "timing":
                env.setdefault("CUDA_VISIBLE_DEVICES", str(index % self.num_gpus))
            result = await self._run_now(job, env, progress)
            result.queued_s = queued_s
            return result

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
                    raise SandboxError(f"{exc}\n(if bwrap is the problem: {INSTALL_HINT})") from None
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
        job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self._prune_job_dirs()
        host_dir = self.view.layout.jobs_dir / job_id
        for sub in ("in", "out", "home", "tmp", "shm", "cache/triton", "cache/torch_extensions", "cache/cuda"):
            (host_dir / sub).mkdir(parents=True)
        cgroup = None
        if self.cgroups.available:
            try:
                cgroup = self.cgroups.create(job_id, self.limits.memory_bytes, self.limits.num_processes)
            except CgroupError as exc:
                raise SandboxError(str(exc)) from None
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        mine.setblocking(False)
        child = Child(job_id, host_dir, zygote, self.cgroups, cgroup, mine, out_r, err_r)
        try:
            try:
                child.exited = await zygote.spawn(job_id, [out_w, err_w, theirs.fileno()])
            finally:
                for fd in (out_w, err_w):
                    os.close(fd)
                theirs.close()
            hello = await recv(mine)
            if hello is None:
                raise SandboxError(f"a new job child died before its handshake; zygote log:\n{zygote.log_tail()}")
            if cgroup is not None:
                cgroup.add(hello[1])
            policy = self.view.confinement(job_id, landlock="landlock" in self.isolation.layers,
                                           seccomp="seccomp" in self.isolation.layers)
            mine.send(json.dumps({"job_dir": self.view.job_dir(job_id), "confine": policy}).encode())
            reply = await recv(mine)
            message = json_or_empty(reply[0]) if reply else {}
            if "confined" not in message:
                reason = message.get("confine_error", "the job child died while confining itself")
                raise SandboxError(f"could not confine a job child ({reason}); no agent code ran")
        except BaseException as exc:  # cancelled (aclose) or failed: leave nothing behind
            child.discard()
            if isinstance(exc, ZygoteDied):
                raise SandboxError(f"{exc}; zygote log:\n{zygote.log_tail()}") from None
            if isinstance(exc, OSError):
                raise SandboxError(f"cannot move the job child into its cgroup: {exc}") from None
            raise
        return child

    async def _take_child(self) -> Child:
        """The spare child if it is still good, else a new one; then start the next spare."""
        spare, self._spare = self._spare, None
        child = None
        if spare is not None:
            try:
                child = await spare
            except (SandboxError, asyncio.CancelledError):
                child = None
            if child is not None and not child.usable:
                child.discard()
                child = None
        if child is None:
            child = await self._prepare_child()
        if not self._closed:
            self._spare = asyncio.ensure_future(self._prepare_child())
            self._spare.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved later
        return child

    async def _run_now(self, job: Job, env: dict[str, str], progress: Progress | None) -> JobResult:
        for name in job.inputs:
            if "/" in name or name in ("", ".", ".."):
                raise SandboxError(f"input name {name!r} must be a plain file name")
        for _ in range(3):  # a spare that died idle (its zygote restarted) is replaced, not blamed
            child = await self._take_child()
            try:
                for name, src in job.inputs.items():
                    copy = shutil.copytree if Path(src).is_dir() else shutil.copyfile
                    try:
                        copy(src, child.host_dir / "in" / name)
                    except OSError as exc:
                        raise SandboxError(f"cannot copy input {name!r} from {src}: {exc}") from None
                spec = self.view.job_spec(job_id=child.job_id, op=job.op, payload=job.payload, env=env,
                                          device=self.device, limits=self.limits, timeout_s=job.timeout_s)
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
                return await self._supervise(child, job, child.host_dir, progress)
            finally:
                child.discard()
        raise SandboxError(f"job children keep dying before they start; zygote log:\n{self._zygote_log_tail()}")

    def _zygote_log_tail(self) -> str:
        return self._zygote.log_tail() if self._zygote is not None else ""

    def _prune_job_dirs(self) -> None:
        dirs = sorted(self.view.layout.jobs_dir.iterdir())
        for old in dirs[:-KEEP_JOB_DIRS]:
            shutil.rmtree(old, ignore_errors=True)

    async def _supervise(self, child: Child, job: Job, host_dir: Path, progress: Progress | None) -> JobResult:
        stdout = Capture(child.out_r, self.limits.output_bytes, self.limits.tail_bytes)
        stderr = Capture(child.err_r, self.limits.output_bytes, self.limits.tail_bytes)
        child.out_r = child.err_r = -1  # the captures own and close them now
        ending = outcome.Ending(wait_status=None, timeout_s=job.timeout_s, output_cap_bytes=self.limits.output_bytes,
                                memory_limit_bytes=self.limits.memory_bytes, num_processes=self.limits.num_processes)
        tail = ProgressTail(host_dir / "progress.jsonl", progress)
        disk = DiskWatch(host_dir, self.limits.disk_bytes, self.limits.max_files)
        ending.disk_cap = (self.limits.disk_bytes, self.limits.max_files)
        started = time.monotonic()
        try:
            done = asyncio.ensure_future(wait_done(child.sock))
            watchers = [done, child.exited, stdout.exceeded, stderr.exceeded, disk.exceeded]
            finished, _ = await _wait_first(watchers, job.timeout_s, [tail.poll, disk.poll])
            ending.done = done in finished and done.result()
            ending.timed_out = not finished
            if stdout.exceeded in finished or stderr.exceeded in finished:
                ending.output_exceeded = "stdout" if stdout.exceeded in finished else "stderr"
            if disk.exceeded in finished:
                ending.disk_exceeded = (disk.num_bytes, disk.num_files)
            if ending.timed_out or ending.output_exceeded or ending.disk_exceeded:
                await child.kill()
            elif not ending.done or child.cgroup is None:
                try:  # the wait status says how it ended (without cgroups it is also how we know it ended)
                    ending.wait_status = (await asyncio.wait_for(child.exited, 10.0))["status"]
                except (ZygoteDied, asyncio.TimeoutError):
                    pass
            done.cancel()
        finally:
            wall_s = time.monotonic() - started
            if child.cgroup is not None or not (ending.done or ending.wait_status is not None):
                await child.kill()  # what is left (daemons, stray threads), or all of it if we were cancelled
            if child.cgroup is not None:
                ending.oom_kills, ending.pids_limit_hits = child.cgroup.oom_kills(), child.cgroup.pids_limit_hits()
            await stdout.finish()
            await stderr.finish()
            await tail.poll()
        removed = outcome.sanitize_tree(host_dir / "out")
        status, result, error = outcome.judge(ending, host_dir)
        if removed:
            error = (error + "\n" if error else "") + f"removed from out/ (not plain files): {', '.join(removed[:10])}"
        return JobResult(status=status, result=result, out_dir=host_dir / "out", error=error,
                         stdout_tail=stdout.tail(), stderr_tail=stderr.tail(), wall_s=wall_s)

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


async def _wait_first(futures: list, timeout_s: float, pollers: list) -> tuple[set, set]:
    """Wait for the first future to finish (or the timeout), running the pollers meanwhile."""
    deadline = time.monotonic() + timeout_s
    pending = set(futures)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return set(), pending
        done, pending = await asyncio.wait(pending, timeout=min(left, 0.25), return_when=asyncio.FIRST_COMPLETED)
        if done:
            return done, pending
        for poll in pollers:
            await poll()
