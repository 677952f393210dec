"""What a long-running confined process (a service: a serving engine) is given: plain data.

A `ServiceSpec` names everything the policy grants beyond what every job gets, so a policy
can be read (and sent to another node) without running anything; `to_dict`/`from_dict`
round-trip it through JSON. Paths inside it are as the service sees them: build them from
the `ServiceSite` of the sandbox that will run it (`Sandbox.service_site(name)`).

What every service gets without asking (the job policy, policy.py): read-only system and
Python install, read-only workspace (its hidden folders masked), its own writable folder
(HOME, TMPDIR, caches; UNIX sockets for its own IPC go there too), a network namespace
with only loopback, its own cgroup, Landlock + seccomp + rlimits applied before it starts.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Mount:
    """A host path the service sees at `target` (without bubblewrap: at `source` itself)."""

    source: str  # absolute host path (a model folder, our own package)
    target: str  # absolute path inside the sandbox
    writable: bool = False  # False: read-only bind and Landlock read; True: read-write both


@dataclass(frozen=True)
class ServiceSpec:
    name: str  # its folder's name in the sandbox's jobs folder; unique among live services
    argv: tuple[str, ...]  # the command line, paths as the service sees them
    port: int  # loopback TCP port it listens on; the host reaches it through `socket`
    socket: str = "engine.sock"  # file name of the UNIX socket in its folder, relayed to `port`
    env: dict[str, str] = field(default_factory=dict)  # over the per-process env (HOME, caches...)
    python_path: tuple[str, ...] = ()  # folders on PYTHONPATH, before the worker package's own
    mounts: tuple[Mount, ...] = ()  # more host paths it sees; the server's state is masked in them
    loopback_ports: tuple[int, ...] = ()  # more TCP ports it may bind/connect on loopback (own IPC)
    # It picks loopback ports of its own at run time (vLLM: ZMQ and torch.distributed sockets),
    # so Landlock leaves TCP alone and the network namespace, which holds only loopback, is
    # the boundary; seccomp lets it open netlink sockets to list that loopback (getifaddrs).
    # Without bubblewrap (--allow-unsandboxed) that namespace is the host's.
    own_ports: bool = False
    shared_memory: bool = False  # a private /dev/shm (tmpfs, counted in its memory cgroup)
    executables: tuple[str, ...] = ()  # programs it runs (e.g. "g++" for torch.compile): checked
    memory_bytes: int | None = None  # cgroup memory ceiling, bytes; None: Limits.memory_bytes
    num_processes: int | None = None  # cgroup pids.max (threads count); None: Limits.num_processes
    disk_bytes: int | None = None  # all files in its folder, bytes; None: Limits.disk_bytes
    num_files: int = 65536  # RLIMIT_NOFILE: open files and sockets (an engine holds many)
    grace_s: float = 10.0  # at stop: seconds between SIGTERM and SIGKILL of its process
    # Scheduling priority of everything it runs (its session's autogroup and each process): the
    # server measures it (the load generator's clocks) and must not wait behind it for a core.
    # At 0 a sandboxed vLLM (a worker pinned to core 0, in a session of its own) kept the load
    # generator on the run queue 30-90% of each run on a 2-core host: tokens arrived in one
    # burst, TTFT ~240 ms against the engine's own 15 ms (bench/engine_priority.py).
    nice: int = 5

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"service name {self.name!r}: letters, digits, '.', '_', '-' only")
        for mount in self.mounts:
            if not (mount.source.startswith("/") and mount.target.startswith("/")):
                raise ValueError(f"mount {mount}: source and target must be absolute paths")
        for port in (self.port, *self.loopback_ports):
            if not 0 < port < 65536:
                raise ValueError(f"port {port} is not a TCP port (1-65535)")

    @property
    def tcp_ports(self) -> tuple[int, ...] | None:
        """Every loopback port Landlock lets it bind and connect to; None: any (`own_ports`)."""
        return None if self.own_ports else (self.port, *self.loopback_ports)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ServiceSpec:
        tuples = {
            k: tuple(data.get(k, ()))
            for k in ("argv", "python_path", "loopback_ports", "executables")
        }
        mounts = tuple(Mount(**m) for m in data.get("mounts", ()))
        return cls(**{**data, **tuples, "mounts": mounts})


@dataclass(frozen=True)
class ServiceSite:
    """Where one sandbox runs a service named `name`: what its spec's argv and env refer to."""

    sandboxed: bool  # False: no bubblewrap; mounts are seen at their host paths, ports shared
    python: str  # the interpreter, a path valid inside
    folder: str  # its own writable folder as it sees it
    port: int  # a loopback port free for it (in its own network namespace: always the same)

    def seen_at(self, mount: Mount) -> str:
        """The path the service sees `mount` at."""
        return mount.target if self.sandboxed else mount.source
