"""What a job may see and use: pure data, no side effects.

`Limits` are the numbers; `Layout` says where things live on the host; `SandboxView`
turns both into the bwrap command line of the zygote and the per-job confinement spec
(environment, Landlock paths, rlimits) the job child applies to itself, and, from the
same parts plus what a `ServiceSpec` asks for, a service's bwrap command line and the
spec its host (worker/engine_host.py) confines itself with. Everything here
is computed from arguments only, so it can be read and tested without running anything.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .service_spec import ServiceSpec

MiB = 1 << 20
GiB = 1 << 30

# Mount points inside the sandbox.
WORKER_ROOT = "/opt/ia"  # the worker package is mounted at /opt/ia/ia_worker
WORKER_PACKAGE = "ia_worker"
WORKSPACE_MOUNT = "/workspace"
JOBS_MOUNT = "/jobs"

# /etc entries a job needs (dynamic linker, user names, alternatives for cc/gcc);
# never /etc whole: it holds shadow, ssh host keys, machine secrets.
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "nsswitch.conf",
    "localtime",
)
# Device files every job may open; /dev/shm is left out so jobs share no memory files.
BASIC_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def _default_memory_bytes() -> int:
    """A quarter of the machine's RAM, between 2 and 32 GiB: several jobs fit at once."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 * GiB
    return int(min(max(total // 4, 2 * GiB), 32 * GiB))


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = field(default_factory=_default_memory_bytes)  # cgroup, per job
    # cgroup pids.max per job; threads count too (torch starts one per core, plus triton, nvcc)
    num_processes: int = field(default_factory=lambda: max(512, 4 * (os.cpu_count() or 1)))
    file_bytes: int = 2 * GiB  # RLIMIT_FSIZE: largest file a job may write
    disk_bytes: int = 8 * GiB  # all files in the job's folder together (checked every second)
    max_files: int = 100_000  # files and folders in the job's folder
    num_files: int = 4096  # RLIMIT_NOFILE
    output_bytes: int = 8 * MiB  # stdout and stderr, each; more kills the job
    tail_bytes: int = 16 * 1024  # how much of stdout/stderr comes back in a JobResult

    def cpu_seconds(self, timeout_s: float) -> int:
        """RLIMIT_CPU: all cores busy for the whole wall-clock budget, plus slack."""
        return int(math.ceil(timeout_s * (os.cpu_count() or 1))) + 10


@dataclass(frozen=True)
class Layout:
    """Host paths the sandbox is built from."""

    worker_dir: Path  # sandbox/worker on the host
    workspace: Path
    jobs_dir: Path  # one writable folder holding every job's folder
    etc_dir: Path  # synthesised passwd/group for the sandbox user
    pkg_dir: Path  # without bwrap: holds an `ia_worker` symlink to worker_dir, for PYTHONPATH
    python_prefixes: tuple[Path, ...]  # sys.prefix, sys.base_prefix, ...
    hidden_dirs: tuple[Path, ...] = ()  # inside the bound trees, masked (our own installed code)
    # Relative folders of the workspace the job must not see: the server's state (ledger,
    # artifacts, references, other jobs) lives in <workspace>/.infra-agent for user workspaces.
    workspace_hidden: tuple[str, ...] = ()
    gpu_devices: tuple[str, ...] = ()  # /dev/nvidia* present on the host
    python: str = "python3"  # the interpreter, as a path valid inside the sandbox too


@dataclass(frozen=True)
class SandboxView:
    """Where the job sees things; `sandboxed` False means host paths (no bwrap)."""

    layout: Layout
    sandboxed: bool

    @property
    def jobs_root(self) -> str:
        return JOBS_MOUNT if self.sandboxed else str(self.layout.jobs_dir)

    @property
    def workspace_root(self) -> str:
        return WORKSPACE_MOUNT if self.sandboxed else str(self.layout.workspace)

    @property
    def worker_parent(self) -> str:
        """The folder on PYTHONPATH that holds the `ia_worker` package."""
        return WORKER_ROOT if self.sandboxed else str(self.layout.pkg_dir)

    def job_dir(self, job_id: str) -> str:
        return f"{self.jobs_root}/{job_id}"

    def host_path(self, job_path: str) -> Path:
        """The host path of a path inside the jobs folder, as a job reports it."""
        rel = Path(job_path).relative_to(self.jobs_root)
        if ".." in rel.parts:
            raise ValueError(f"{job_path} is not inside the jobs folder")
        return self.layout.jobs_dir / rel

    def workspace_path(self, host_path: Path) -> str:
        rel = Path(host_path).resolve().relative_to(self.layout.workspace.resolve())
        if any(rel.is_relative_to(hidden) for hidden in self.layout.workspace_hidden):
            # masked in the job's view anyway; refusing here keeps a planner from naming it
            raise ValueError(f"{rel} is in a folder hidden from jobs (the server's state)")
        return str(Path(self.workspace_root) / rel)

    # --- the zygote ---------------------------------------------------------------------

    def zygote_env(self) -> dict[str, str]:
        return {
            "PATH": _PATH,
            "PYTHONPATH": self.worker_parent,
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "LANG": "C.UTF-8",
            "HOME": "/nonexistent",
        }

    def zygote_argv(self, ctl_fd: int) -> list[str]:
        cmd = [self.layout.python, "-m", f"{WORKER_PACKAGE}.zygote", str(ctl_fd)]
        return self.bwrap_argv() + ["--", *cmd] if self.sandboxed else cmd

    def bwrap_argv(self) -> list[str]:
        lay = self.layout
        argv = [
            "bwrap",
            "--unshare-all",
            "--hostname",
            "sandbox",
            "--cap-drop",
            "ALL",
            "--uid",
            "65534",
            "--gid",
            "65534",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
        ]
        for key, value in self.zygote_env().items():
            argv += ["--setenv", key, value]
        # The private /tmp comes first: binds below it (a venv or checkout under /tmp, as
        # in a CI clone) are then mounted inside it instead of being hidden by it.
        argv += ["--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / name
            if host.is_symlink():
                argv += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                argv += ["--ro-bind", str(host), f"/{name}"]
        for name in ETC_FILES:
            argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for name in ("passwd", "group"):
            argv += ["--ro-bind", str(lay.etc_dir / name), f"/etc/{name}"]
        for prefix in lay.python_prefixes:
            argv += ["--ro-bind", str(prefix), str(prefix)]
        for hidden in lay.hidden_dirs:
            argv += ["--tmpfs", str(hidden), "--remount-ro", str(hidden)]
        argv += [
            "--ro-bind",
            str(lay.worker_dir),
            f"{WORKER_ROOT}/{WORKER_PACKAGE}",
            "--ro-bind",
            str(lay.workspace),
            WORKSPACE_MOUNT,
        ]
        for rel in lay.workspace_hidden:
            argv += [
                "--tmpfs",
                f"{WORKSPACE_MOUNT}/{rel}",
                "--remount-ro",
                f"{WORKSPACE_MOUNT}/{rel}",
            ]
        argv += ["--bind", str(lay.jobs_dir), JOBS_MOUNT, "--proc", "/proc", "--dev", "/dev"]
        if lay.gpu_devices:
            for dev in lay.gpu_devices:
                argv += ["--dev-bind", dev, dev]
            argv += ["--ro-bind", "/sys", "/sys"]
        return argv

    # --- one job --------------------------------------------------------------------------

    def job_env(self, job_dir: str, device: str, extra: dict[str, str]) -> dict[str, str]:
        """Per-job HOME and caches inside the job folder: no job plants code for the next."""
        env = {
            "PATH": _PATH,
            "LANG": "C.UTF-8",
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": f"{job_dir}/home",
            "TMPDIR": f"{job_dir}/tmp",
            "XDG_CACHE_HOME": f"{job_dir}/cache",
            "TRITON_HOME": f"{job_dir}/home",
            "TRITON_CACHE_DIR": f"{job_dir}/cache/triton",
            "TORCH_EXTENSIONS_DIR": f"{job_dir}/cache/torch_extensions",
            "CUDA_CACHE_PATH": f"{job_dir}/cache/cuda",
            "MPLCONFIGDIR": f"{job_dir}/cache/matplotlib",
            "TORCHINDUCTOR_CACHE_DIR": f"{job_dir}/cache/inductor",
        }  # its default is /tmp/torchinductor_<user>
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
            # The one place the interpreter is chosen: without a GPU, Triton kernels run
            # interpreted in every job (compile jobs drop it: they compile ahead of time).
            env["TRITON_INTERPRET"] = "1"
        env.update(extra)
        return env

    def landlock_rules(self, job_dir: str) -> dict[str, list[str]]:
        lay = self.layout
        read_only = [
            "/usr",
            *(f"/etc/{n}" for n in (*ETC_FILES, "passwd", "group")),
            *(str(p) for p in lay.python_prefixes),
            self.worker_parent,
            "/proc",
        ]
        if self.sandboxed:
            read_only.append(WORKSPACE_MOUNT)  # hidden folders are empty mounts there
        else:
            read_only.append(str(lay.worker_dir))  # the pkg/ia_worker symlink's target
            read_only += self._visible_workspace_entries()
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            if Path(f"/{name}").is_dir() and not Path(f"/{name}").is_symlink():
                read_only.append(f"/{name}")
        if lay.gpu_devices:
            read_only.append("/sys")
        return {
            "read_only": read_only,
            "read_write": [job_dir],
            "devices": [*BASIC_DEVICES, *lay.gpu_devices],
        }

    def _visible_workspace_entries(self) -> list[str]:
        """Without bwrap nothing can be masked: allow the workspace entry by entry, minus hidden ones."""
        lay = self.layout
        if not lay.workspace_hidden:
            return [str(lay.workspace)]
        hidden_tops = {Path(rel).parts[0] for rel in lay.workspace_hidden}
        try:
            return [str(p) for p in sorted(lay.workspace.iterdir()) if p.name not in hidden_tops]
        except OSError:
            return []

    def confinement(self, job_id: str, *, landlock: bool, seccomp: bool) -> dict:
        """What the job child applies to itself before it is given a job."""
        job_dir = self.job_dir(job_id)
        binds = {"/tmp": f"{job_dir}/tmp", "/dev/shm": f"{job_dir}/shm"}
        # The job folder (without bwrap) or the Python install (a venv in a CI clone under
        # /tmp) may lie under a target: covering it would hide it, so that target stays
        # shared and Landlock alone keeps the job from writing there.
        needed = [job_dir, *map(str, self.layout.python_prefixes)]
        binds = {
            target: source
            for target, source in binds.items()
            if not any(path.startswith(target + "/") for path in needed)
        }
        return {
            "landlock": self.landlock_rules(job_dir) if landlock else None,
            "seccomp": seccomp,
            "private_mounts": binds,
        }

    def job_spec(
        self,
        *,
        job_id: str,
        op: str,
        payload: dict,
        env: dict[str, str],
        device: str,
        limits: Limits,
        timeout_s: float,
    ) -> dict:
        """job.json: what the harness reads before it runs anything of the agent's."""
        job_dir = self.job_dir(job_id)
        return {
            "id": job_id,
            "op": op,
            "payload": payload,
            "device": device,
            "job_dir": job_dir,
            "workspace": self.workspace_root,
            "env": self.job_env(job_dir, device, env),
            "rlimits": {
                "cpu_s": limits.cpu_seconds(timeout_s),
                "file_bytes": limits.file_bytes,
                "num_files": limits.num_files,
            },
        }

    # --- one service (service_spec.py) ------------------------------------------------------

    def service_bwrap_argv(self, spec: ServiceSpec, masked: tuple[Path, ...]) -> list[str]:
        """The jobs' namespace plus the spec's mounts; `masked` host folders (the server's
        state) are hidden wherever a mount would show them, as the workspace's are."""
        argv = self.bwrap_argv()
        for mount in spec.mounts:
            source = Path(mount.source).resolve()
            argv += ["--bind" if mount.writable else "--ro-bind", str(source), mount.target]
            for folder in masked:
                if folder.is_relative_to(source):
                    rel = folder.relative_to(source)
                    hidden = f"{mount.target}/{rel}" if rel.parts else mount.target
                    argv += ["--tmpfs", hidden, "--remount-ro", hidden]
        if spec.shared_memory:
            argv += ["--tmpfs", "/dev/shm"]  # its own: nothing shared with the host or jobs
        return argv

    def missing_executables(self, names: tuple[str, ...]) -> list[str]:
        """Those of `names` not on the sandbox's PATH (its /usr and /bin are the host's)."""
        return [name for name in names if not shutil.which(name, path=_PATH)]

    def service_host_spec(
        self,
        spec: ServiceSpec,
        folder: str,
        *,
        device: str,
        limits: Limits,
        landlock: bool,
        seccomp: bool,
    ) -> dict:
        """engine.json: what the service host reads and confines itself with before it
        starts the service (`folder`: the service's own folder as it sees it)."""
        env = {
            **self.job_env(folder, device, {}),
            "PYTHONPATH": os.pathsep.join([*spec.python_path, self.worker_parent]),
            **spec.env,
        }
        rules = self.landlock_rules(folder)
        for mount in spec.mounts:
            seen = mount.target if self.sandboxed else mount.source
            rules["read_write" if mount.writable else "read_only"].append(seen)
        if self.sandboxed:  # folders bwrap made to hold the mounts; without it, the mounts only
            rules["read_only"] += spec.python_path
        if spec.shared_memory:
            rules["read_write"].append("/dev/shm")
        return {
            "folder": folder,
            "socket": spec.socket,
            "port": spec.port,
            "tcp_ports": None if spec.tcp_ports is None else list(spec.tcp_ports),
            "argv": list(spec.argv),
            "env": env,
            "landlock": rules if landlock else None,
            "seccomp": seccomp,
            "netlink": spec.own_ports,  # to find its loopback interface (getifaddrs)
            "grace_s": spec.grace_s,
            "nice": spec.nice,
            "file_bytes": limits.file_bytes,
            "num_files": max(limits.num_files, spec.num_files),
        }


_PATH = "/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin"
