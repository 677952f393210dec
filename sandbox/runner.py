"""The Sandbox: queue a job, run it in a fresh child of the warm zygote, return raw results.

One job, in order: wait for a slot of its kind; make its folder (in/, out/, home, caches)
and its cgroups; ask the zygote for a child, passing it the job's stdout/stderr pipes and
its own socket; when the child says hello (the kernel stamps its pid), move it into the
cgroups and let it go; it confines itself and says which layers hold; then watch it with
a wall-clock timeout, output caps and progress; kill everything left in its cgroup;
judge what it left (outcome.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Awaitable, Callable

from . import outcome
from .cgroups import CgroupError, CgroupManager, JobCgroup
from .isolation import INSTALL_HINT, Isolation, probe
from .job import Job, JobResult
from .launcher import Zygote, ZygoteDied
from .policy import Layout, Limits, SandboxView
from .slots import Slots
from .streams import Capture, ProgressTail

Progress = Callable[[float, "float | None", str], Awaitable[None]]
KEEP_JOB_DIRS = 256  # older job folders are deleted as new jobs start
_HANDSHAKE_TIMEOUT_S = 30.0


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

        layout = self._prepare_state(gpus)
        self.cgroups = CgroupManager()
        self.cgroups.remove_stale()
        self.isolation: Isolation = probe(SandboxView(layout, sandboxed=True), self.cgroups)
        self.view = SandboxView(layout, sandboxed=self.isolation.sandboxed)
        self._zygote: Zygote | None = None
        self._zygote_lock: asyncio.Lock | None = None
        self._closed = False

    def _prepare_state(self, gpus: list[str]) -> Layout:
        jobs, etc, pkg = self.state_dir / "jobs", self.state_dir / "etc", self.state_dir / "pkg"
        for d in (jobs, etc, pkg):
            d.mkdir(parents=True, exist_ok=True)
        (etc / "passwd").write_text("nobody:x:65534:65534:sandbox:/nonexistent:/usr/sbin/nologin\n")
        (etc / "group").write_text("nogroup:x:65534:\n")
        worker = Path(__file__).resolve().parent / "worker"
        link = pkg / "ia_worker"
        if not link.is_symlink() or link.resolve() != worker:
            link.unlink(missing_ok=True)
            link.symlink_to(worker)
        prefixes = sorted({Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})
        prefixes = [p for p in prefixes if not any(q != p and q in p.parents for q in prefixes)]
        package_dir = worker.parent.parent  # site-packages/infra_agent when installed (not editable)
        hidden = [package_dir] if any(package_dir.is_relative_to(p) for p in [*prefixes, Path("/usr")]) else []
        return Layout(worker_dir=worker, workspace=self.workspace, jobs_dir=jobs, etc_dir=etc, pkg_dir=pkg,
                      python_prefixes=tuple(prefixes), hidden_dirs=tuple(hidden),
                      gpu_devices=tuple(gpus) if self.num_gpus else (), python=sys.executable)

    def workspace_path(self, host_path: Path) -> str:
        """Where the worker sees a file of the workspace (mounted read-only)."""
        return self.view.workspace_path(host_path)

    async def run(self, job: Job, progress: Progress | None = None) -> JobResult:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if not self.isolation.sandboxed and not self.allow_unsandboxed:
            raise SandboxError(f"refusing to run agent code without isolation ({self.isolation.missing.get('bwrap')})")
        if job.kind not in self._slots:
            raise SandboxError(f"unknown job kind {job.kind!r}; use one of {', '.join(self._slots)}")
        queued_from = time.monotonic()
        async with self._slots[job.kind].slot(progress) as index:
            queued_s = time.monotonic() - queued_from
            env = dict(job.env)
            if self.device == "cuda" and job.kind == "timing":
                env.setdefault("CUDA_VISIBLE_DEVICES", str(index % self.num_gpus))
            result = await self._run_now(job, env, progress)
            result.queued_s = queued_s
            return result

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
            return self._zygote

    def _make_job_dir(self, job: Job) -> tuple[str, Path]:
        job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        host_dir = self.view.layout.jobs_dir / job_id
        for sub in ("in", "out", "home", "tmp", "cache/triton", "cache/torch_extensions", "cache/cuda"):
            (host_dir / sub).mkdir(parents=True)
        for name, src in job.inputs.items():
            if "/" in name or name in ("", ".", ".."):
                raise SandboxError(f"input name {name!r} must be a plain file name")
            copy = shutil.copytree if Path(src).is_dir() else shutil.copyfile
            copy(src, host_dir / "in" / name)
        self._prune_job_dirs()
        return job_id, host_dir

    def _prune_job_dirs(self) -> None:
        dirs = sorted(self.view.layout.jobs_dir.iterdir())
        for old in dirs[:-KEEP_JOB_DIRS]:
            shutil.rmtree(old, ignore_errors=True)

    async def _run_now(self, job: Job, env: dict[str, str], progress: Progress | None) -> JobResult:
        zygote = await self._ensure_zygote()
        job_id, host_dir = self._make_job_dir(job)
        spec = self.view.job_spec(job_id=job_id, op=job.op, payload=job.payload, env=env, device=self.device,
                                  limits=self.limits, timeout_s=job.timeout_s,
                                  landlock="landlock" in self.isolation.layers,
                                  seccomp="seccomp" in self.isolation.layers)
        (host_dir / "job.json").write_text(json.dumps(spec))
        cgroup = None
        if self.cgroups.available:
            try:
                cgroup = self.cgroups.create(job_id, self.limits.memory_bytes, self.limits.num_processes)
            except CgroupError as exc:
                raise SandboxError(str(exc)) from None
        try:
            return await self._supervise(zygote, job, job_id, host_dir, cgroup, progress)
        finally:
            if cgroup is not None:
                await asyncio.to_thread(cgroup.kill_all)
                cgroup.remove()

    async def _supervise(self, zygote: Zygote, job: Job, job_id: str, host_dir: Path,
                         cgroup: JobCgroup | None, progress: Progress | None) -> JobResult:
        loop = asyncio.get_running_loop()
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        mine.setblocking(False)
        stdout = Capture(out_r, self.limits.output_bytes, self.limits.tail_bytes)
        stderr = Capture(err_r, self.limits.output_bytes, self.limits.tail_bytes)
        try:
            exited = await zygote.spawn(job_id, self.view.job_dir(job_id), [out_w, err_w, theirs.fileno()])
        finally:
            for fd in (out_w, err_w):
                os.close(fd)
            theirs.close()
        started = time.monotonic()
        ending = outcome.Ending(wait_status=None, timeout_s=job.timeout_s, output_cap_bytes=self.limits.output_bytes,
                                memory_limit_bytes=self.limits.memory_bytes, num_processes=self.limits.num_processes)
        tail = ProgressTail(host_dir / "progress.jsonl", progress)
        try:
            await self._handshake(mine, cgroup, exited)
            started = time.monotonic()
            watchers = [exited, stdout.exceeded, stderr.exceeded]
            done, _ = await _wait_first(watchers, job.timeout_s, tail)
            if exited not in done:
                ending.timed_out = not done
                ending.output_exceeded = "stdout" if stdout.exceeded in done else "stderr" if done else None
                await self._kill(zygote, job_id, cgroup)
            try:
                report = await asyncio.wait_for(exited, 10.0)
                ending.wait_status = report["status"]
            except (ZygoteDied, asyncio.TimeoutError):
                pass
        finally:
            mine.close()
            wall_s = time.monotonic() - started
            if cgroup is not None:
                await asyncio.to_thread(cgroup.kill_all)  # double-forked daemons, stray threads
                ending.oom_kills, ending.pids_limit_hits = cgroup.oom_kills(), cgroup.pids_limit_hits()
            await stdout.finish()
            await stderr.finish()
            await tail.poll()
        removed = outcome.sanitize_tree(host_dir / "out")
        status, result, error = outcome.judge(ending, host_dir)
        if removed:
            error = (error + "\n" if error else "") + f"removed from out/ (not plain files): {', '.join(removed[:10])}"
        return JobResult(status=status, result=result, out_dir=host_dir / "out", error=error,
                         stdout_tail=stdout.tail(), stderr_tail=stderr.tail(), wall_s=wall_s)

    async def _handshake(self, mine: socket.socket, cgroup: JobCgroup | None, exited: asyncio.Future) -> None:
        """Place the child in its cgroups before it runs anything, then learn its layers."""
        loop = asyncio.get_running_loop()
        hello = await _recv(loop, mine, with_creds=True)
        if hello is None:
            raise SandboxError(f"the job child died before its handshake; zygote log:\n{self._zygote.log_tail()}")
        _, pid = hello
        if cgroup is not None:
            cgroup.add(pid)
        mine.send(b"go")
        reply = await _recv(loop, mine, with_creds=False)
        message = json.loads(reply[0]) if reply else {}
        if "confined" not in message:
            reason = message.get("confine_error", "the job child died while confining itself")
            raise SandboxError(f"could not confine the job ({reason}); no agent code ran")

    async def _kill(self, zygote: Zygote, job_id: str, cgroup: JobCgroup | None) -> None:
        if cgroup is not None:
            await asyncio.to_thread(cgroup.kill_all)
        try:
            await zygote.kill(job_id)  # its process group too (the only kill without cgroups)
        except ZygoteDied:
            pass

    def zygote_pids(self) -> list[int]:
        """Host pids of the zygote's process tree (empty when none runs): for tests and ops."""
        return self._zygote.host_pids() if self._zygote is not None and self._zygote.alive else []

    async def aclose(self) -> None:
        self._closed = True
        if self._zygote is not None:
            self._zygote.terminate()
            self._zygote = None
        self.cgroups.close()


async def _recv(loop: asyncio.AbstractEventLoop, sock: socket.socket, with_creds: bool) -> tuple[bytes, int] | None:
    """One packet (and the sender's pid as this process sees it), or None at EOF/timeout."""
    future = loop.create_future()
    space = socket.CMSG_SPACE(struct.calcsize("iII"))

    def on_readable() -> None:
        try:
            data, ancillary, _, _ = sock.recvmsg(65536, space)
        except BlockingIOError:
            return
        except OSError:
            data, ancillary = b"", []
        pid = 0
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", value[: struct.calcsize("iII")])[0]
        if not future.done():
            future.set_result((data, pid) if data else None)

    loop.add_reader(sock.fileno(), on_readable)
    try:
        return await asyncio.wait_for(future, _HANDSHAKE_TIMEOUT_S)
    except asyncio.TimeoutError:
        return None
    finally:
        loop.remove_reader(sock.fileno())


async def _wait_first(futures: list, timeout_s: float, tail: ProgressTail) -> tuple[set, set]:
    """Wait for the first future to finish (or the timeout), forwarding progress meanwhile."""
    deadline = time.monotonic() + timeout_s
    pending = set(futures)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return set(), pending
        done, pending = await asyncio.wait(pending, timeout=min(left, 0.25), return_when=asyncio.FIRST_COMPLETED)
        if done:
            return done, pending
        await tail.poll()
