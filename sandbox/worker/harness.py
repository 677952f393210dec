"""The job child: handshake, confine itself, run one op, write raw results, exit.

Runs in a process the zygote forked for exactly one job (``run_child``), usually before
the job exists (a spare). The order is the security argument:

1. new session, die with the zygote;
2. say hello to the parent over the job's own socket (the kernel stamps our pid as the
   parent sees it) and block until the parent has moved us into the job's cgroups and
   sent {"job_dir", "confine"};
3. take the stdout/stderr pipes, enter the job folder, confine: a private /tmp and
   /dev/shm (the job's own folders, in a mount namespace of its own), Landlock, seccomp;
   report the layers in force ({"confined": ...}) and wait for {"run": true};
4. read job.json (written by the parent meanwhile), take its environment and rlimits;
5. only then run the op, which runs agent code;
6. write the result, close stdout/stderr, tell the parent "done", and exit (the parent
   need not wait for a big address space to be torn down).

Results go to ``result.json`` (the op's return value) or ``error.json`` (exception
type, message, and the traceback trimmed to the agent's own frames). The parent
judges; nothing written here is trusted.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import struct
import sys
import tempfile
import traceback
from pathlib import Path

from . import confine, seccomp
from .context import JobContext

JOB_FILE = "job.json"
RESULT_FILE = "result.json"
ERROR_FILE = "error.json"
_PR_SET_PDEATHSIG = 1


def run_child(
    zygote_pid: int, stdout_fd: int, stderr_fd: int, job_sock: socket.socket, seccomp_filter: bytes
) -> None:
    """Never returns: the process ends with os._exit."""
    code = 0
    try:
        os.setsid()  # own process group: the zygote can kill the job's whole group
        confine.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != zygote_pid:  # the zygote died before prctl took effect
            os._exit(70)
        go = _hello(job_sock)
        _take_stdio(stdout_fd, stderr_fd)
        os.chdir(go["job_dir"])
        try:
            layers = _confine(go["confine"], seccomp_filter)
        except Exception as exc:  # noqa: BLE001 - reported to the parent as an infrastructure failure
            job_sock.send(json.dumps({"confine_error": f"{type(exc).__name__}: {exc}"}).encode())
            os._exit(71)
        job_sock.send(json.dumps({"confined": layers}).encode())
        if _receive(job_sock).get("run") is not True:
            os._exit(70)
        spec = json.loads(Path(JOB_FILE).read_text())
        os.environ.clear()
        os.environ.update(spec["env"])
        # The zygote's imports (torch._dynamo among them) asked tempfile for a folder before any job
        # existed, and tempfile caches the answer: forget it, so TMPDIR (the job's own tmp/) decides.
        tempfile.tempdir = None
        limits = spec["rlimits"]
        confine.apply_rlimits(limits["cpu_s"], limits["file_bytes"], limits["num_files"])
        _run_op(spec)
        _flush_and_close_stdio()
        job_sock.send(b'{"done": true}')
    except BaseException:  # noqa: BLE001 - a harness bug must still end the process
        traceback.print_exc()
        code = 72
    finally:
        _flush_and_close_stdio()
        os._exit(code)


def _hello(job_sock: socket.socket) -> dict:
    """Send our credentials; the parent answers (after cgroup placement) {"job_dir", "confine"}."""
    creds = struct.pack("iII", os.getpid(), os.getuid(), os.getgid())
    job_sock.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])
    return _receive(job_sock)


def _receive(job_sock: socket.socket) -> dict:
    data = job_sock.recv(65536)
    if not data:
        os._exit(70)  # the parent gave up on this child
    return json.loads(data)


def _flush_and_close_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or full pipe must not keep us alive
            pass
    for fd in (1, 2):
        try:
            os.close(fd)  # the parent sees EOF now, not after the exit teardown
        except OSError:
            pass


def _take_stdio(stdout_fd: int, stderr_fd: int) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    for fd in (devnull, stdout_fd, stderr_fd):
        os.close(fd)


def _confine(policy: dict, seccomp_filter: bytes) -> dict:
    layers = {}
    private = policy.get("private_mounts") or {}
    try:  # best effort: without it /tmp and /dev/shm stay closed to the job (Landlock), not shared
        confine.private_mounts(private)
        layers["private_mounts"] = sorted(private)
    except (confine.ConfineError, OSError) as exc:
        layers["private_mounts_error"] = str(exc)
        private = {}
    if policy.get("landlock"):
        rules = policy["landlock"]
        read_write = rules["read_write"] + sorted(private)
        layers["landlock_abi"] = confine.apply_landlock(
            rules["read_only"], read_write, rules["devices"]
        )
    if policy.get("seccomp"):
        layers["seccomp_instructions"] = seccomp.apply_seccomp(seccomp_filter)
    return layers


def _run_op(spec: dict) -> None:
    job_dir = Path(spec["job_dir"])
    workspace = Path(spec["workspace"]) if spec.get("workspace") else None
    ctx = JobContext(
        job_dir=job_dir,
        in_dir=job_dir / "in",
        out_dir=job_dir / "out",
        workspace=workspace,
        device=spec["device"],
    )
    try:
        op = spec["op"]
        if not op.isidentifier():
            raise ValueError(f"op name {op!r} is not a module name")
        module = importlib.import_module(f"{__package__}.ops.{op}")
        result = module.run(spec["payload"], ctx)
        if not isinstance(result, dict):
            raise TypeError(f"op {op} returned {type(result).__name__}, not a dict")
        _write_json(job_dir / RESULT_FILE, result)
    except BaseException as exc:  # noqa: BLE001 - agent code may raise anything, SystemExit included
        _write_json(
            job_dir / ERROR_FILE, describe_exception(exc, [str(job_dir), str(workspace or job_dir)])
        )


# Exceptions that, raised by the harness's own code with no frame of the agent's on the
# stack, mean a bug of ours rather than something wrong with the job (a bad entry name,
# bad source and bad arguments come as ValueError, TypeError, SyntaxError, ImportError...).
OUR_FAULTS = (
    AssertionError,
    AttributeError,
    IndexError,
    KeyError,
    NameError,
    UnboundLocalError,
    ZeroDivisionError,
    RecursionError,
)
# the package as imported (/opt/ia/ia_worker in bwrap, a symlink without) and its real folder
_HARNESS_ROOTS = tuple(
    {str(Path(__file__).parent) + os.sep, str(Path(__file__).resolve().parent) + os.sep}
)


def describe_exception(exc: BaseException, agent_roots: list[str]) -> dict:
    """Type, message and the frames from the agent's files (not torch's, triton's or the
    harness's). Harness frames are shown only when the fault is ours: then they are what
    a bug report needs, and the message says so."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if any(f.filename.startswith(root + os.sep) for root in agent_roots)]
    ours = [f for f in frames if f.filename.startswith(_HARNESS_ROOTS)]
    last = frames[-1] if frames else None
    is_our_fault = bool(frames) and not mine and last in ours and isinstance(exc, OUR_FAULTS)
    if is_our_fault:
        mine = ours
    elif last is not None and last not in mine and last not in ours:
        mine.append(last)  # where it was finally raised, inside a library the agent called
    message = str(exc)
    if isinstance(exc, SystemExit):
        message = f"the code called sys.exit({exc.code!r})"
    if is_our_fault:
        message = (
            f"{message} (in the sandbox worker's own code: a bug in the server, not in your code)"
        )
    errno_value = getattr(exc, "errno", None)
    errno_number = errno_value if isinstance(errno_value, int) else None
    return {
        "type": type(exc).__name__,
        "message": message,
        "errno": errno_number,
        "traceback": "".join(traceback.format_list(mine)),
    }


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))  # raises on non-JSON data: the op must return raw JSON
    os.replace(tmp, path)
