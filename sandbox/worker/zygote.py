"""The zygote: imports torch/triton/numpy once, then forks one fresh child per job.

Started by the parent (inside bwrap when isolation is available) as
``python -m ia_worker.zygote <control-fd>``. It talks to the parent over one
SOCK_SEQPACKET socket, one JSON message per packet:

    parent -> zygote  {"spawn": id}                     + fds [stdout, stderr, job socket]
                      {"kill": id}                      (fallback when no cgroups)
    zygote -> parent  {"ready": true, "pid": ..., "landlock_abi": ..., "seccomp_error": ...}
                      {"exited": id, "status": wait status, "maxrss_kb": ..., "cpu_s": ...}

It never initialises CUDA (forking a CUDA context is undefined), never runs agent code
itself, and exits when the parent's end of the socket closes. It is a child subreaper
so a job's orphans come back to it to be reaped instead of lingering.

The parent asks for a child before it has a job for it (a spare): the child says hello
on its job socket and waits; forking the big pre-imported process is off the job's
critical path. ``gc.freeze()`` keeps the children's garbage collector from touching
(and so copying) every page the zygote owns.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import pkgutil
import selectors
import signal
import socket
import sys
import traceback

from . import confine, seccomp

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_MAX_MESSAGE = 65536


def main() -> None:
    ctl = socket.socket(fileno=int(sys.argv[1]))
    confine.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    confine.prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _warm_imports()
    import torch

    from . import harness

    if torch.cuda.is_initialized():  # a forked CUDA context is undefined behaviour: refuse to serve
        print(
            "zygote: CUDA was initialised while importing; refusing to fork jobs", file=sys.stderr
        )
        sys.exit(3)

    try:
        seccomp_filter, seccomp_error = seccomp.build_seccomp_filter(), None
    except confine.ConfineError as exc:
        seccomp_filter, seccomp_error = b"", str(exc)
    gc.collect()
    gc.freeze()

    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd fires
    _send(
        ctl,
        {
            "ready": True,
            "pid": os.getpid(),
            "landlock_abi": confine.landlock_abi(),
            "seccomp_error": seccomp_error,
            "python": sys.version.split()[0],
        },
    )

    jobs: dict[int, str] = {}  # pid -> job id
    selector = selectors.DefaultSelector()
    selector.register(ctl, selectors.EVENT_READ, "ctl")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    while True:
        for key, _ in selector.select():
            if key.data == "child":
                _drain(wake_r)
                _reap(ctl, jobs)
                continue
            try:
                data, fds, _, _ = socket.recv_fds(ctl, _MAX_MESSAGE, 3, socket.MSG_CMSG_CLOEXEC)
            except ConnectionResetError:
                data, fds = b"", []
            if not data:  # the parent is gone: take every job with us
                for pid in jobs:
                    _kill_group(pid)
                os._exit(0)
            msg = json.loads(data)
            if "spawn" in msg:
                pid = _spawn(fds, ctl, (wake_r, wake_w), harness, seccomp_filter)
                jobs[pid] = msg["spawn"]
            elif "kill" in msg:
                for pid, job_id in jobs.items():
                    if job_id == msg["kill"]:
                        _kill_group(pid)


def _warm_imports() -> None:
    """What every job needs, imported once; CUDA stays uninitialised."""
    import numpy  # noqa: F401
    import torch  # noqa: F401

    # Tracing on the meta device (the reference's native output dtypes) runs torch's Python
    # refs, wrapped in dynamo.disable, whose first call imports torch._dynamo (~900 modules):
    # ~1 s in every reference job, once here.
    import torch._dynamo  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401
    import triton.runtime.interpreter  # noqa: F401 - TRITON_INTERPRET jobs (the CPU hosts)

    from . import context, loader, ops, tensors  # noqa: F401

    for module in pkgutil.iter_modules(ops.__path__):
        try:
            importlib.import_module(f"{ops.__name__}.{module.name}")
        except Exception:  # noqa: BLE001 - a broken op fails its own jobs, not the zygote
            traceback.print_exc()
    _warm_triton_launch()


def _warm_triton_launch() -> None:
    """The first launch of any @triton.jit kernel specialises its arguments, and that imports
    Triton's code generator and Gluon's descriptor types (~50 modules): ~0.1 s of CPU in every
    forked job (a check_numerics call forks a dozen), once here (bench/zygote_first_launch.py).
    A CPU tensor: no CUDA."""
    try:
        import torch
        from triton.runtime.jit import mangle_type

        mangle_type(torch.empty(1))
    except Exception:  # noqa: BLE001 - a warm-up only saves time; jobs import what they need
        traceback.print_exc()


def _spawn(
    fds: list[int], ctl: socket.socket, wake: tuple[int, int], harness, seccomp_filter: bytes
) -> int:
    stdout_fd, stderr_fd, sock_fd = fds
    zygote_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (*wake, ctl.detach()):
            os.close(fd)
        harness.run_child(
            zygote_pid, stdout_fd, stderr_fd, socket.socket(fileno=sock_fd), seccomp_filter
        )
    for fd in fds:
        os.close(fd)
    return pid


def _reap(ctl: socket.socket, jobs: dict[int, str]) -> None:
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        job_id = jobs.pop(pid, None)
        if job_id is None:
            continue  # an orphan of some job, reparented to us: reaped, nothing to report
        _kill_group(pid, leader_alive=False)  # whatever the job left in its process group
        _send(
            ctl,
            {
                "exited": job_id,
                "status": status,
                "maxrss_kb": usage.ru_maxrss,
                "cpu_s": usage.ru_utime + usage.ru_stime,
            },
        )


def _kill_group(pid: int, leader_alive: bool = True) -> None:
    """SIGKILL the job's process group (and the job itself while it is not yet reaped:
    after reaping, its pid may name someone else)."""
    for kill in (os.killpg, os.kill) if leader_alive else (os.killpg,):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _send(ctl: socket.socket, msg: dict) -> None:
    ctl.sendall(json.dumps(msg).encode())


if __name__ == "__main__":
    main()
