"""The seccomp layer of a job's confinement (see confine.py): a deny-list compiled to BPF by
libseccomp (a maintained BPF compiler, loaded with ctypes; stdlib only) once in the zygote
and loaded by each job child, so a job cannot open non-UNIX sockets, ptrace, read other
processes' memory, load BPF, open perf events, mount, make namespaces, use keyrings,
userfaultfd or io_uring. A serving engine's variant also allows IPv4/IPv6 sockets: it runs
in a network namespace with only loopback, and Landlock limits TCP to its own port.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

from .confine import _PR_SET_NO_NEW_PRIVS, ConfineError, _libc, prctl

_ACT_ALLOW = 0x7FFF0000
_CMP_LT, _CMP_EQ, _CMP_GT, _CMP_MASKED_EQ = 2, 4, 6, 7
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK = 1, 2, 10, 16

DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "perf_event_open",
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "name_to_handle_at",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
)
# clone() flags that would create namespaces; clone3 passes flags in memory that a
# filter cannot read, so it answers ENOSYS and libc falls back to clone().
# (CLONE_NEWTIME is absent: in clone() its bit is part of the exit-signal byte.)
_NAMESPACE_FLAGS = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _load_libseccomp():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    return lib


_seccomp = _load_libseccomp()  # loaded once in the zygote; children inherit the mapping


def seccomp_available() -> str | None:
    """None when the filter can be built, else the reason it cannot."""
    return (
        None if _seccomp is not None else "libseccomp.so.2 not found (apt-get install libseccomp2)"
    )


def _errno_action(err: int) -> int:
    return 0x00050000 | (err & 0xFFFF)


def build_seccomp_filter(allow_inet: bool = False, allow_netlink: bool = False) -> bytes:
    """The deny-list as a BPF program (compiled once in the zygote, loaded by each child).

    `allow_inet` lets a serving engine open IPv4/IPv6 sockets: it runs in a network
    namespace of its own with only loopback, and Landlock limits TCP to its own port.
    `allow_netlink` (with it) lets it list its interfaces (getifaddrs opens a netlink socket:
    torch.distributed's gloo does, in vLLM); the namespace's only interface is loopback, and
    without capabilities netlink can read it, not change it."""
    if _seccomp is None:
        raise ConfineError(seccomp_available())
    lib = _seccomp
    ctx = lib.seccomp_init(_ACT_ALLOW)
    if not ctx:
        raise ConfineError("seccomp_init failed")

    def add(name: str, action: int, *cmps: tuple[int, int, int, int]) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:
            return  # not a syscall on this architecture
        array = (_ArgCmp * max(len(cmps), 1))(*[_ArgCmp(*c) for c in cmps])
        rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array)
        if rc != 0:
            raise ConfineError(f"seccomp rule for {name} failed: {os.strerror(-rc)}")

    try:
        for name in DENIED_SYSCALLS:
            add(name, _errno_action(errno.EPERM))
        allowed = (
            _AF_UNIX,
            *((_AF_INET, _AF_INET6) if allow_inet else ()),
            *((_AF_NETLINK,) if allow_netlink else ()),
        )
        for name in ("socket", "socketpair"):  # arg0 is the address family
            for comparison in _other_families(allowed):
                add(name, _errno_action(errno.EACCES), comparison)
        for flag in _NAMESPACE_FLAGS:
            add("clone", _errno_action(errno.EPERM), (0, _CMP_MASKED_EQ, flag, flag))
        add("clone3", _errno_action(errno.ENOSYS))
        fd = os.memfd_create("seccomp-bpf")
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc != 0:
                raise ConfineError(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            os.lseek(fd, 0, os.SEEK_SET)
            program = b""
            while chunk := os.read(fd, 1 << 16):
                program += chunk
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
    return program


def _other_families(allowed: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """arg0 comparisons that together match every address family but `allowed`, one per rule (a
    rule may compare an argument only once): below the lowest, above the highest, each between."""
    low, high = min(allowed), max(allowed)
    between = [(0, _CMP_EQ, f, 0) for f in range(low + 1, high) if f not in allowed]
    return [(0, _CMP_LT, low, 0), (0, _CMP_GT, high, 0), *between]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def apply_seccomp(program: bytes) -> int:
    """Load a filter from build_seccomp_filter() into this process; returns its length."""
    if not program or len(program) % 8:
        raise ConfineError("empty or malformed seccomp program")
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    if prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise ConfineError(f"PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}")
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        raise ConfineError(f"loading the seccomp filter failed: {os.strerror(ctypes.get_errno())}")
    return len(program) // 8
