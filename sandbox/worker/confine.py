"""Per-job confinement a forked job child applies to itself before running agent code.

Each layer goes through the kernel's own interface and ctypes (stdlib only, so the
harness keeps its light import set):

- a private /tmp and /dev/shm: the job's own folders bind-mounted in a user and mount
  namespace of its own, every capability dropped afterwards (best effort: where it
  fails, Landlock keeps /tmp and /dev/shm closed instead);
- resource limits (``setrlimit``): CPU seconds, file size, open files, no core dumps;
- Landlock (raw syscalls 444-446): write only the job's own folder, read only the
  folders the policy lists, no TCP, and (ABI >= 6) no signals or abstract UNIX sockets
  across the job's boundary, so one job cannot kill the zygote or read a sibling job;
- seccomp through libseccomp (seccomp.py, beside this file): deny non-UNIX sockets,
  ptrace, process_vm_*, bpf, perf_event_open, mount, namespaces, keyrings, userfaultfd,
  io_uring.

Each function raises ``ConfineError`` when its layer cannot be applied; for Landlock
and seccomp the harness then refuses to run the job: a job never runs with less
isolation than the parent reported.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource

# --- Landlock -------------------------------------------------------------------------

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86-64 and arm64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
# Rights each ABI version knows; handling a right the kernel lacks is an error.
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1

READ_ONLY = EXECUTE | READ_FILE | READ_DIR
READ_WRITE = (1 << 16) - 1  # everything, masked down to what the ABI handles


class ConfineError(Exception):
    """A confinement layer could not be applied; the job must not run."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is __attribute__((packed)): 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
# prctl's arguments are unsigned longs: declare them, or ctypes passes ints whose upper
# register halves the kernel may read as garbage (PR_SET_NO_NEW_PRIVS demands zeros).
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]


def prctl(option: int, arg2: int = 0) -> int:
    return _libc.prctl(option, arg2, 0, 0, 0)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is absent or disabled."""
    abi = _libc.syscall(
        _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    return max(int(abi), 0)


def _fs_rights(abi: int) -> int:
    return _FS_BY_ABI.get(abi, (1 << 16) - 1)


def apply_landlock(
    read_only: list[str],
    read_write: list[str],
    devices: list[str],
    tcp_ports: tuple[int, ...] | None = (),
) -> int:
    """Restrict this process (and all it starts) to the listed paths; returns the ABI used.

    `devices` are character devices opened read-write (with ioctl: GPUs need it).
    Paths that do not exist are skipped: the policy lists optional folders.
    `tcp_ports` may be bound and connected to (a serving engine's own port, inside a
    network namespace that has only loopback); every other TCP port stays closed. None
    leaves TCP alone (an engine that picks its own loopback ports for its internal sockets:
    its network namespace, which holds only loopback, is then the boundary).
    """
    abi = landlock_abi()
    if abi < 1:
        raise ConfineError("Landlock is not available in this kernel")
    handled = _fs_rights(abi)
    attr = _RulesetAttr(
        handled,
        (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 and tcp_ports is not None else 0,
        (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0,
    )
    size = 8  # landlock_ruleset_attr as ABI 1-3 know it: fs rights only
    if abi >= 4:
        size = 16  # + net rights
    if abi >= 6:
        size = ctypes.sizeof(_RulesetAttr)  # + scoped
    ruleset = _libc.syscall(
        _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise ConfineError(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:
        grants = (
            (read_only, READ_ONLY),
            (read_write, READ_WRITE),
            (devices, READ_FILE | WRITE_FILE | IOCTL_DEV),
        )
        for paths, rights in grants:
            for path in paths:
                _add_path_rule(ruleset, path, rights & handled)
        for port in tcp_ports if abi >= 4 and tcp_ports is not None else ():
            _add_port_rule(ruleset, port)
        if prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
            raise ConfineError(f"PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}")
        if _libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise ConfineError(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi


def _add_path_rule(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS  # the kernel rejects directory rights on a file
        rule = _PathBeneathAttr(rights, fd)
        if (
            _libc.syscall(
                _SYS_ADD_RULE,
                ctypes.c_int(ruleset),
                ctypes.c_int(_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
            != 0
        ):
            raise ConfineError(
                f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}"
            )
    finally:
        os.close(fd)


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1  # struct landlock_net_port_attr is packed: 16 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_RULE_NET_PORT = 2


def _add_port_rule(ruleset: int, port: int) -> None:
    rule = _NetPortAttr(_NET_BIND_TCP | _NET_CONNECT_TCP, port)
    if (
        _libc.syscall(
            _SYS_ADD_RULE,
            ctypes.c_int(ruleset),
            ctypes.c_int(_RULE_NET_PORT),
            ctypes.byref(rule),
            ctypes.c_uint32(0),
        )
        != 0
    ):
        raise ConfineError(
            f"landlock_add_rule(tcp port {port}) failed: {os.strerror(ctypes.get_errno())}"
        )


# --- a private /tmp and /dev/shm ----------------------------------------------------------

_CLONE_NEWUSER, _CLONE_NEWNS = 0x10000000, 0x00020000
_MS_BIND, _MS_REC = 4096, 16384
_PR_CAPBSET_DROP, _CAP_LAST = 24, 63
_CAPABILITY_V3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def private_mounts(binds: dict[str, str]) -> None:
    """Give this process its own mount table with `binds` ({target: source}, e.g. /tmp ->
    the job's tmp/), so tools that hard-code /tmp or /dev/shm (multiprocessing, DataLoader
    workers) work and still share nothing with other jobs.

    Needs a user namespace of its own (the mount needs CAP_SYS_ADMIN there); every
    capability that brings is dropped before returning, and seccomp later forbids
    creating another one.
    """
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
        raise ConfineError(f"unshare(user, mount) failed: {os.strerror(ctypes.get_errno())}")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    for target, source in binds.items():
        if (
            _libc.mount(
                source.encode(), target.encode(), None, ctypes.c_ulong(_MS_BIND | _MS_REC), None
            )
            != 0
        ):
            raise ConfineError(
                f"bind mount of {source} on {target} failed: {os.strerror(ctypes.get_errno())}"
            )
    for cap in range(_CAP_LAST + 1):
        prctl(_PR_CAPBSET_DROP, cap)  # EINVAL past the last capability this kernel knows: fine
    header, data = _CapHeader(_CAPABILITY_V3, 0), (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise ConfineError(f"dropping capabilities failed: {os.strerror(ctypes.get_errno())}")


# --- resource limits --------------------------------------------------------------------


def apply_rlimits(cpu_s: int, file_bytes: int, num_files: int) -> None:
    """Hard limits too, so the job cannot raise them back (never above the inherited hard limit)."""
    for which, value in (
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_FSIZE, file_bytes),
        (resource.RLIMIT_NOFILE, num_files),
        (resource.RLIMIT_CORE, 0),
    ):
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))
