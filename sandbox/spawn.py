"""A job child, ready before its job arrives: the zygote forks it with the job's stdout
and stderr pipes and its own socket; it says hello (the kernel stamps its pid), moves
into new cgroups, gets its job folder and confines itself (Landlock, seccomp) before
anything of the job is loaded. Any failure leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

from .cgroups import CgroupError, CgroupManager
from .child import HANDSHAKE_TIMEOUT_S, Child, json_or_empty, recv
from .errors import SandboxError
from .isolation import Isolation
from .launcher import Zygote, ZygoteDied
from .policy import Limits, SandboxView

JOB_SUBDIRS = (
    "in",
    "out",
    "home",
    "tmp",
    "shm",
    "cache/triton",
    "cache/torch_extensions",
    "cache/cuda",
)


async def spawn_child(
    zygote: Zygote, view: SandboxView, cgroups: CgroupManager, limits: Limits, isolation: Isolation
) -> Child:
    """A fresh child of `zygote`, in its own new cgroups and job folder, confined, waiting for a job."""
    job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    host_dir = view.layout.jobs_dir / job_id
    for sub in JOB_SUBDIRS:
        (host_dir / sub).mkdir(parents=True)
    cgroup = None
    if cgroups.available:
        try:
            cgroup = cgroups.create(job_id, limits.memory_bytes, limits.num_processes)
        except CgroupError as exc:
            raise SandboxError(str(exc)) from None
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    mine.setblocking(False)
    child = Child(job_id, host_dir, zygote, cgroups, cgroup, mine, out_r, err_r)
    try:
        try:
            child.exited = await zygote.spawn(job_id, [out_w, err_w, theirs.fileno()])
        finally:
            for fd in (out_w, err_w):
                os.close(fd)
            theirs.close()
        hello = await recv(mine)
        if hello is None:
            raise SandboxError(
                f"a new job child died or was silent for {HANDSHAKE_TIMEOUT_S:g} s before its "
                f"handshake; zygote log:\n{zygote.log_tail()}"
            )
        if cgroup is not None:
            cgroup.add(hello[1])
        policy = view.confinement(
            job_id, landlock="landlock" in isolation.layers, seccomp="seccomp" in isolation.layers
        )
        mine.send(json.dumps({"job_dir": view.job_dir(job_id), "confine": policy}).encode())
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
