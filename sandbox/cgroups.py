"""Per-job cgroups: a memory ceiling, a process ceiling, and a kill that reaches everything.

Every process a job starts (threads, compilers, a double-forked daemon) stays in the
job's cgroup, so killing the cgroup's members ends the job completely, and the kernel's
counters say whether the job hit the memory (OOM kill) or process limit.

cgroup v1 (memory, pids, and freezer for an atomic kill) and v2 (memory, pids,
cgroup.kill) are both handled; cgroups live under the server's own cgroup in a folder
named after the server's pid, so a later server can remove what a killed one left.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_PREFIX = "infra-agent-"


class CgroupError(Exception):
    pass


class JobCgroup:
    def __init__(self, dirs: dict[str, Path], v2: bool):
        self.dirs = dirs  # controller -> folder ("unified" on v2)
        self.v2 = v2

    def add(self, pid: int) -> None:
        for d in self.dirs.values():
            (d / "cgroup.procs").write_text(str(pid))

    def procs(self) -> set[int]:
        pids: set[int] = set()
        for d in self.dirs.values():
            try:
                pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return pids

    def kill_listed(self) -> bool:
        """SIGKILL the members listed now; True when none is left that could still run code.

        A task stays listed until its address space is torn down (tens of ms for a
        process forked from the zygote on a busy machine); one whose every thread is
        already in the kernel's exit path (PF_EXITING) can never run user code again.
        """
        pids = self.procs()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not pids or all(_exiting(tid) for tid in self._threads())

    def _threads(self) -> set[int]:
        tids: set[int] = set()
        for d in self.dirs.values():
            try:
                tids |= {
                    int(t)
                    for t in (d / ("cgroup.threads" if self.v2 else "tasks")).read_text().split()
                }
            except OSError:
                pass
        return tids

    def kill_all(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every member until none is left; True when the cgroup is empty."""
        deadline = time.monotonic() + timeout_s
        if self.v2:
            _try_write(self.dirs["unified"] / "cgroup.kill", "1")
        freezer = self.dirs.get("freezer")
        if freezer is not None:  # frozen processes cannot fork while we collect them
            _try_write(freezer / "freezer.state", "FROZEN")
        while True:
            pids = self.procs()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if freezer is not None:
                _try_write(freezer / "freezer.state", "THAWED")  # killed tasks die once thawed
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def _counter(self, file: str, key: str) -> int:
        for d in self.dirs.values():
            try:
                for line in (d / file).read_text().splitlines():
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
            except OSError:
                continue
        return 0

    def oom_kills(self) -> int:
        return self._counter("memory.events" if self.v2 else "memory.oom_control", "oom_kill")

    def pids_limit_hits(self) -> int:
        return self._counter("pids.events", "max")

    def peak_memory_bytes(self) -> int | None:
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            for d in self.dirs.values():
                try:
                    return int((d / name).read_text())
                except (OSError, ValueError):
                    continue
        return None

    def remove(self, wait_s: float = 0.5) -> bool:
        """rmdir the folders; a task still exiting keeps them busy for a moment. True when gone."""
        deadline = time.monotonic() + wait_s
        for d in self.dirs.values():
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.01)
        return True


_PF_EXITING = 0x4


def _exiting(tid: int) -> bool:
    """True when the task is gone or already inside do_exit()."""
    try:
        stat = Path(f"/proc/{tid}/stat").read_text()
    except OSError:
        return True
    flags = int(stat.rsplit(")", 1)[1].split()[6])  # field 9 of proc(5), counted after the comm
    return bool(flags & _PF_EXITING)


class CgroupManager:
    """Finds where this server may create cgroups; `reason` says why not when it cannot."""

    _instances = 0  # several sandboxes in one process each get their own folder

    def __init__(self, root: Path = CGROUP_ROOT):
        self.root = root
        self.v2 = (root / "cgroup.controllers").exists()
        self.reason: str | None = None
        self.bases: dict[str, Path] = {}
        self._enabled = False
        self._busy: list[JobCgroup] = []  # removed later: a task was still exiting
        CgroupManager._instances += 1
        self._name = f"{_PREFIX}{os.getpid()}-{CgroupManager._instances}"
        try:
            self.bases = self._find_bases()
            self._probe()
        except CgroupError as exc:
            self.reason = str(exc)
            self.close()
            self.bases = {}

    def _probe(self) -> None:
        """Create (and remove) a cgroup with limits now, so a host that forbids it is known up front."""
        probe = self.create("probe", 1 << 30, 16)
        probe.remove()
        self.close()  # the folders come back with the first job

    @property
    def available(self) -> bool:
        return self.reason is None

    def _find_bases(self) -> dict[str, Path]:
        own = {}
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else ["unified"]:
                own[c] = path.lstrip("/")
        wanted = ["unified"] if self.v2 else ["memory", "pids", "freezer"]
        bases = {}
        for c in wanted:
            mount = self.root if self.v2 else self.root / c
            if c in own and mount.is_dir():
                bases[c] = mount / own[c] / self._name
        if self.v2:
            controllers = (
                (self.root / own.get("unified", "") / "cgroup.controllers").read_text().split()
            )
            if "unified" not in bases or not {"memory", "pids"} <= set(controllers):
                raise CgroupError(
                    f"cgroup v2 without memory+pids controllers here (have: {' '.join(controllers)})"
                )
        elif not {"memory", "pids"} <= set(bases):
            raise CgroupError(
                "cgroup v1 memory and pids hierarchies not mounted under /sys/fs/cgroup"
            )
        return bases

    def _ensure_server_dirs(self) -> None:
        if self._enabled:
            return
        for base in self.bases.values():
            base.mkdir(exist_ok=True)
        if self.v2:
            self._enable_v2_controllers(self.bases["unified"].parent)
            _write(self.bases["unified"] / "cgroup.subtree_control", "+memory +pids")
        self._enabled = True

    def release(self, cgroup: JobCgroup) -> None:
        """Remove a finished job's cgroup now if it is empty, else on a later call (never blocks)."""
        self._busy = [c for c in [*self._busy, cgroup] if not c.remove(wait_s=0)]

    @staticmethod
    def _enable_v2_controllers(own: Path) -> None:
        """Delegate memory+pids below our own cgroup. v2 forbids that while the cgroup holds
        processes (ours), so on EBUSY this process first moves into a leaf of its own."""
        try:
            _write(own / "cgroup.subtree_control", "+memory +pids")
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            leaf = own / f"{_PREFIX}server-{os.getpid()}"
            leaf.mkdir(exist_ok=True)
            _write(leaf / "cgroup.procs", str(os.getpid()))
            _write(own / "cgroup.subtree_control", "+memory +pids")

    def create(self, job_id: str, memory_bytes: int, num_processes: int) -> JobCgroup:
        """Make the job's cgroups with their limits; raises CgroupError (with the OS reason)."""
        dirs = {c: base / job_id for c, base in self.bases.items()}
        try:
            self._ensure_server_dirs()
            for d in dirs.values():
                d.mkdir()
            if self.v2:
                d = dirs["unified"]
                _write(d / "memory.max", str(memory_bytes))
                _try_write(d / "memory.swap.max", "0")
                _write(d / "pids.max", str(num_processes))
            else:
                _write(dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
                _try_write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory_bytes))
                _write(dirs["pids"] / "pids.max", str(num_processes))
        except OSError as exc:
            JobCgroup({c: d for c, d in dirs.items() if d.is_dir()}, self.v2).remove()
            raise CgroupError(f"cannot create a cgroup for job {job_id}: {exc}") from exc
        return JobCgroup(dirs, self.v2)

    def remove_stale(self) -> list[Path]:
        """Kill and remove what servers that died without cleaning up left behind."""
        removed = []
        for base in self.bases.values():
            for folder in base.parent.glob(f"{_PREFIX}*"):
                m = re.fullmatch(rf"{_PREFIX}(?:server-)?(\d+)(?:-\d+)?", folder.name)
                if not m or Path(f"/proc/{m.group(1)}").exists():
                    continue  # not ours, or its server (maybe this one) is alive
                for job in _subfolders(folder):
                    JobCgroup({"x": job}, self.v2).kill_all(timeout_s=2.0)
                    JobCgroup({"x": job}, self.v2).remove()
                JobCgroup({"x": folder}, self.v2).remove()
                removed.append(folder)
        return removed

    def close(self) -> None:
        """Kill whatever is left in this sandbox's cgroups and remove them."""
        for base in self.bases.values():
            for job in _subfolders(base):
                JobCgroup({"x": job}, self.v2).kill_all(timeout_s=2.0)
                JobCgroup({"x": job}, self.v2).remove()
            JobCgroup({"x": base}, self.v2).remove()
        self._enabled = False


def remove_stale_cgroups() -> list[Path]:
    """At server start-up: remove the cgroup folders of servers that are gone (a SIGKILL
    leaves them), before this server's first job rather than at it."""
    manager = CgroupManager()
    return manager.remove_stale() if manager.available else []


def _subfolders(folder: Path) -> list[Path]:
    """The job cgroups under `folder`; none when it is gone. Several sandboxes may sweep the
    same stale folder at once (Ray starts a node's workers together): the first removes it."""
    try:
        return [p for p in folder.iterdir() if p.is_dir()]
    except FileNotFoundError:
        return []


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _try_write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False
