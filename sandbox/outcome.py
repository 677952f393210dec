"""From what a finished job left behind to a JobResult status and an error an agent can act on.

Everything in the job folder was written by untrusted code: files are opened without
following symlinks, must be regular files, and are size-capped; `out/` is cleaned of
anything but regular files and folders before the caller reads it (a symlink there
could point the parent at the reference outputs or at /etc/shadow).
"""

from __future__ import annotations

import json
import os
import signal
import stat
from dataclasses import dataclass
from pathlib import Path

from .worker.harness import ERROR_FILE, RESULT_FILE

MAX_RESULT_BYTES = 16 << 20


@dataclass
class Ending:
    """What the parent observed, independent of the job's own files."""

    wait_status: int | None  # None: no status (the zygote died, or the harness said done)
    done: bool = False  # the harness reported the op finished and its result written
    timed_out: bool = False
    timeout_s: float = 0.0
    output_exceeded: str | None = None  # "stdout" / "stderr"
    disk_exceeded: tuple[int, int] | None = None  # (bytes, files) found in the job's folder
    disk_cap: tuple[int, int] = (0, 0)  # (bytes, files) allowed
    output_cap_bytes: int = 0
    oom_kills: int = 0
    memory_limit_bytes: int = 0
    pids_limit_hits: int = 0
    num_processes: int = 0


def read_untrusted(path: Path, max_bytes: int = MAX_RESULT_BYTES) -> bytes | None:
    """The file's bytes if it is a regular file (not a link, FIFO, device) under the cap."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(max_bytes + 1)[:max_bytes]
    finally:
        os.close(fd)


def sanitize_tree(root: Path) -> list[str]:
    """Remove everything under `root` that is not a plain file or folder; returns what went."""
    removed = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()
            plain_dir = stat.S_ISDIR(info.st_mode)
            plain_file = (
                stat.S_ISREG(info.st_mode) and info.st_nlink == 1
            )  # a hard link could alias a host file
            if not (plain_dir or plain_file):
                path.unlink()
                removed.append(str(path.relative_to(root)))
        dirs[:] = [
            d for d in dirs if (Path(folder) / d).is_dir() and not (Path(folder) / d).is_symlink()
        ]
    return removed


def judge(ending: Ending, job_dir: Path) -> tuple[str, dict, str | None]:
    """(status, result, error) for a finished job."""
    if ending.timed_out:
        return (
            "timeout",
            {},
            (
                f"exceeded {ending.timeout_s:g} s wall-clock limit; the job and everything it "
                "started were killed"
            ),
        )
    if ending.output_exceeded:
        return (
            "limit",
            {},
            (
                f"{ending.output_exceeded} exceeded {_size(ending.output_cap_bytes)}; the job was killed "
                "(print less, or write large data to files in out/)"
            ),
        )
    if ending.disk_exceeded:
        (num_bytes, num_files), (cap_bytes, cap_files) = ending.disk_exceeded, ending.disk_cap
        return (
            "limit",
            {},
            (
                f"wrote {_size(num_bytes)} in {num_files} files to its folder; the limit is "
                f"{_size(cap_bytes)} and {cap_files} files; the job was killed"
            ),
        )
    if ending.oom_kills:
        return (
            "limit",
            {},
            (
                f"exceeded the memory limit of {_size(ending.memory_limit_bytes)} "
                "(killed by the kernel's OOM killer)"
            ),
        )
    if ending.wait_status is None and not ending.done:
        return (
            "crashed",
            {},
            "the sandbox worker process died while the job ran (it restarts for the next job)",
        )

    result_bytes = read_untrusted(job_dir / RESULT_FILE)
    error_bytes = read_untrusted(job_dir / ERROR_FILE)
    status = 0 if ending.done else ending.wait_status  # "done" comes just before a clean exit
    signum = -os.waitstatus_to_exitcode(status) if os.WIFSIGNALED(status) else None
    code = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None

    if signum is not None:
        name = (
            signal.Signals(signum).name if signum in signal.valid_signals() else f"signal {signum}"
        )
        if signum == signal.SIGXCPU:
            return "limit", {}, f"exceeded the CPU-time limit (killed by {name})"
        if signum == signal.SIGXFSZ:
            return "limit", {}, f"wrote a file over the size limit (killed by {name})"
        return (
            "crashed",
            {},
            f"killed by {name}"
            + (
                " (segmentation fault: a bad pointer or out-of-bounds access)"
                if signum == signal.SIGSEGV
                else ""
            ),
        )
    if error_bytes is not None:
        return _error_status(error_bytes, ending)
    if result_bytes is not None and code == 0:
        try:
            result = json.loads(result_bytes)
        except (ValueError, RecursionError):
            return "crashed", {}, "result.json is not valid JSON"
        if not isinstance(result, dict):
            return "crashed", {}, "result.json is not a JSON object"
        return "ok", result, None
    if code == 0:
        return (
            "crashed",
            {},
            (
                "exited with code 0 without writing a result (os._exit? the process ended before "
                "the op returned)"
            ),
        )
    return "crashed", {}, f"exited with code {code} without writing a result"


def _error_status(error_bytes: bytes, ending: Ending) -> tuple[str, dict, str]:
    try:
        err = json.loads(error_bytes)
        text = f"{err.get('type', 'Error')}: {err.get('message', '')}"
        if err.get("traceback"):
            text += f"\n{err['traceback']}"
        errno_value = err.get("errno")
    except (ValueError, AttributeError, RecursionError):
        return "crashed", {}, "error.json is not valid JSON"
    if errno_value == 27:  # EFBIG: RLIMIT_FSIZE (Python ignores SIGXFSZ, so write() fails instead)
        return "limit", {}, f"wrote a file over the size limit: {text}"
    if ending.pids_limit_hits and errno_value == 11:  # EAGAIN from fork/clone at pids.max
        return "limit", {}, f"hit the limit of {ending.num_processes} processes/threads: {text}"
    return "error", {}, text


def _size(num_bytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:g} {unit}"
    return f"{num_bytes} bytes"
