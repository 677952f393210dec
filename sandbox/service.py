"""Long-running confined processes (services: serving engines), started and stopped.

    site = sandbox.service_site(name)           # where it will see things: build argv/env from it
    svc = await sandbox.start_service(spec)     # running (start() below): own bwrap, cgroup
    svc.alive, svc.pid, svc.log_tail(), svc.death_cause(), svc.pids(), svc.socket_path
    await svc.stop()                            # the whole process tree; its folder is removed

A service runs like a job (policy.py builds both): its own bubblewrap (a network namespace
with only loopback), its own cgroup (memory, processes, a kill that reaches everything),
and inside it `ia_worker.engine_host` confines itself (Landlock, seccomp, rlimits) before
it relays a UNIX socket in the service's folder to the service's port and starts it.
bwrap's --die-with-parent ends it when the server dies, even by SIGKILL. Its folder is
capped like a job's (`DiskCap`) and removed at stop; `sweep_stale` removes what a previous
server's services left (they died with it): their folders, and the short links to their sockets
in the temp folder (`ia-eng-<server pid>-*`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .cgroups import CgroupError, CgroupManager, JobCgroup
from .errors import SandboxError
from .isolation import Isolation
from .owned import make_owned, pid_alive, sweep_dead_owners
from .policy import Limits, SandboxView
from .service_spec import ServiceSpec
from .streams import DiskWatch

OWNER_FILE = "owner.pid"  # the server process that started the service: marks a service folder
HOST_SPEC = "engine.json"  # what the host reads and confines itself with (policy.py)
HOST_LOG = "host.log"  # the service host's own output (bwrap's too)
LOG_FILE = "engine.log"  # the service's output (worker/engine_host.py writes it)
EXIT_FILE = "exit.json"  # written by the host the moment the service exits
CHECK_EVERY_S = 2.0  # how often the disk cap is checked
_UDS_MAX = 100  # sun_path holds 108 bytes; longer host paths go through a short symlink
LINK_PREFIX = "ia-eng-"  # the short link's folder in the temp folder: ia-eng-<server pid>-<random>


@dataclass(frozen=True)
class CpuAccount:
    """The kernel's account of a process tree's live threads (/proc/<pid>/task/<tid>/schedstat):
    time on a CPU and time runnable but waiting in a run queue for one, s (summed over
    threads); and the host's 1-minute load average. A service that waited for a CPU longer than
    it ran was starved by the host, whatever its own code does."""

    ran_s: float
    waited_s: float
    load_1m: float

    def starved(self, wall_s: float) -> bool:
        """Over `wall_s` of its life: it waited for a CPU longer than it ran, and for at least
        half of that time (a process that mostly slept is not starved by a short wait)."""
        return self.waited_s > self.ran_s and self.waited_s >= 0.5 * wall_s

    def words(self) -> str:
        return (
            f"its processes ran {self.ran_s:.1f} s on a CPU and waited {self.waited_s:.1f} s "
            f"for one (the kernel's schedstat, host load {self.load_1m:.1f} on "
            f"{os.cpu_count()} CPUs)"
        )

    @classmethod
    def of(cls, pids: set[int]) -> CpuAccount | None:
        ran = waited = 0
        seen = False
        for pid in pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue  # exited meanwhile
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        on_cpu, in_queue = f.read().split()[:2]
                except (OSError, ValueError):
                    continue
                ran, waited, seen = ran + int(on_cpu), waited + int(in_queue), True
        return cls(ran / 1e9, waited / 1e9, os.getloadavg()[0]) if seen else None


def start(
    spec: ServiceSpec,
    *,
    view: SandboxView,
    cgroups: CgroupManager,
    isolation: Isolation,
    limits: Limits,
    device: str,
    masked: tuple[Path, ...],
) -> Service:
    """Make its folder, write its host's spec, start the host (in bwrap, in a new cgroup) and
    the disk cap; returns at once (readiness is the caller's: it knows the protocol)."""
    missing = view.missing_executables(spec.executables)
    if missing:
        raise SandboxError(
            f"the service needs {', '.join(missing)}, not found on the sandbox's PATH; "
            "install it on this machine"
        )
    folder = view.layout.jobs_dir / spec.name
    try:
        folder.mkdir()
    except FileExistsError:
        raise SandboxError(
            f"a service named {spec.name} exists already; choose another name"
        ) from None
    cgroup = None
    try:
        for sub in ("home", "tmp", "cache"):
            (folder / sub).mkdir()
        claim(folder)
        host_spec = view.service_host_spec(
            spec,
            view.job_dir(spec.name),
            device=device,
            limits=limits,
            landlock="landlock" in isolation.layers,
            seccomp="seccomp" in isolation.layers,
        )
        (folder / HOST_SPEC).write_text(json.dumps(host_spec))
        host_cmd = [
            view.layout.python,
            "-m",
            "ia_worker.engine_host",
            f"{host_spec['folder']}/{HOST_SPEC}",
        ]
        if cgroups.available:
            cgroup = cgroups.create(
                spec.name,
                spec.memory_bytes or limits.memory_bytes,
                spec.num_processes or limits.num_processes,
            )
        cmd = (
            [*view.service_bwrap_argv(spec, masked), "--", *host_cmd]
            if view.sandboxed
            else host_cmd
        )
        env = None if view.sandboxed else {**view.zygote_env(), "PYTHONPATH": view.worker_parent}
        with open(folder / HOST_LOG, "ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=(lambda: cgroup.add(os.getpid())) if cgroup else None,
            )
    except (CgroupError, OSError) as exc:
        if cgroup is not None:
            cgroup.remove(wait_s=1.0)
        shutil.rmtree(folder, ignore_errors=True)
        raise SandboxError(f"cannot start the service {spec.name}: {exc}") from None
    disk = DiskCap(folder, spec.disk_bytes or limits.disk_bytes, limits.max_files)
    svc = Service(spec, folder, proc, cgroup, disk)
    disk.start(lambda: asyncio.to_thread(svc.kill))  # dead, still listed, with the cause
    return svc


class Service:
    """One started service: its process (bwrap, or the host without it), cgroup and folder."""

    def __init__(
        self,
        spec: ServiceSpec,
        folder: Path,
        proc: subprocess.Popen,
        cgroup: JobCgroup | None,
        disk: DiskCap,
    ):
        self.spec = spec
        self.folder = folder  # host path of its own folder
        self.socket_path = _short_socket_path(folder / spec.socket)  # host side of the relay
        self.proc = proc
        self._cgroup = cgroup
        self.disk = disk
        self.started_at = time.time()
        self.final_log: str | None = None  # the log's end, kept when the folder is removed

    @property
    def pid(self) -> int:
        """Host pid of its outermost process (bwrap when sandboxed)."""
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.folder / LOG_FILE

    def log_tail(self, num_bytes: int = 4000) -> str:
        if self.final_log is not None:
            return self.final_log[-num_bytes:]
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, self.log_path.stat().st_size - num_bytes))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        """Running, and the service too (its host writes exit.json the moment it exits)."""
        return self.proc.poll() is None and not (self.folder / EXIT_FILE).exists()

    def exit_code(self) -> int | None:
        """The service's own return code (negative: a signal), as its host recorded it."""
        try:
            return json.loads((self.folder / EXIT_FILE).read_text())["returncode"]
        except (OSError, ValueError, KeyError):
            return self.proc.returncode

    def death_cause(self) -> str:
        """Why it is not running, in words: the disk or memory limit, a signal, or its exit code."""
        if self.disk.exceeded:
            return self.disk.describe()
        if self._cgroup is not None and self._cgroup.oom_kills():
            return (
                f"killed for exceeding its memory limit ({self._cgroup.peak_memory_bytes()} "
                "bytes peak)"
            )
        code = self.exit_code()
        return f"exit code {code}" if code is None or code >= 0 else f"killed by signal {-code}"

    def pids(self) -> set[int]:
        """Host pids of every process it runs (bwrap, its host, the service and children);
        empty without cgroups."""
        return self._cgroup.procs() if self._cgroup is not None else set()

    def cpu_account(self) -> CpuAccount | None:
        """What the kernel says its live threads got so far (None without cgroups or schedstats)."""
        return CpuAccount.of(self.pids())

    def kill(self) -> None:
        """Kill it and all it started now (its folder outgrew the cap); `stop` tidies up."""
        if self._cgroup is not None:
            self._cgroup.kill_all(timeout_s=5.0)
        elif self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def stop(self) -> str:
        """Stop it and everything it started, keep its log's end, remove its folder (caches
        and profiles are unbounded otherwise); returns the log's end."""
        self.disk.cancel()
        await asyncio.to_thread(self._stop_now)
        self.final_log = self.log_tail(200_000)
        await asyncio.to_thread(shutil.rmtree, self.folder, True)
        return self.log_tail()

    def _stop_now(self, grace_s: float = 15.0) -> None:
        """SIGTERM the host and the service (not bwrap: its death SIGKILLs the namespace),
        wait for a clean exit, then end bwrap and kill whatever is left in the cgroup."""
        if self.proc.poll() is None:
            inner = [pid for pid in self.pids() if _comm(pid) != "bwrap"]
            for pid in inner or [self.proc.pid]:
                _signal(pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._cgroup is not None:
            self._cgroup.kill_all(timeout_s=5.0)
            self._cgroup.remove(wait_s=1.0)
        link = Path(self.socket_path)
        if link.is_symlink():
            link.unlink(missing_ok=True)
            link.parent.rmdir()


class DiskCap:
    """Watch one service's folder; `exceeded` holds (bytes, files) once it outgrew the cap."""

    def __init__(self, folder: Path, cap_bytes: int, max_files: int):
        self.folder, self.cap_bytes, self.max_files = folder, cap_bytes, max_files
        self.exceeded: tuple[int, int] | None = None
        self._task: asyncio.Task | None = None

    def start(self, on_exceeded) -> None:
        """Poll until the cap trips (then await `on_exceeded()`) or `cancel` is called."""
        self._task = asyncio.create_task(self._watch(on_exceeded))

    async def _watch(self, on_exceeded) -> None:
        watch = DiskWatch(self.folder, self.cap_bytes, self.max_files, every_s=CHECK_EVERY_S)
        while not watch.exceeded.done():
            await watch.poll()
            await asyncio.sleep(CHECK_EVERY_S)
        self.exceeded = (watch.num_bytes, watch.num_files)
        await on_exceeded()

    def cancel(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    def describe(self) -> str:
        num_bytes, num_files = self.exceeded or (0, 0)
        return (
            f"stopped for exceeding its disk cap: {num_bytes} bytes in {num_files} files in "
            f"its folder (at most {self.cap_bytes} bytes, {self.max_files} files)"
        )


def claim(folder: Path) -> None:
    """Mark `folder` as a service folder of this server (sweep_stale keeps it while we live)."""
    (folder / OWNER_FILE).write_text(str(os.getpid()))


def sweep_stale(jobs_dir: Path) -> int:
    """Remove service folders whose server is gone (a live server's are kept), and the socket
    links such servers left in the temp folder (any workspace's); how many service folders."""
    removed = 0
    for marker in jobs_dir.glob(f"*/{OWNER_FILE}"):
        if owned_by_live_server(marker.parent):
            continue
        shutil.rmtree(marker.parent, ignore_errors=True)
        removed += 1
    sweep_dead_owners(LINK_PREFIX)
    return removed


def owner(folder: Path) -> int | None:
    """The pid of the server that claimed the service folder `folder`; None if unclaimed."""
    try:
        return int((folder / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None


def owned_by_live_server(folder: Path) -> bool:
    """Whether `folder` is a service folder (claim()) of a server that is still alive."""
    pid = owner(folder)
    return pid is not None and pid_alive(pid)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _short_socket_path(path: Path) -> str:
    """`path`, or a symlink to it in a folder of the temp folder named for this server (its pid:
    `stop` removes it, `sweep_stale` does once this server is gone, e.g. SIGKILLed)."""
    if len(str(path)) <= _UDS_MAX:
        return str(path)
    link = make_owned(LINK_PREFIX) / "s"
    link.symlink_to(path)
    return str(link)
