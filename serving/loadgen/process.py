"""The load generator in a process of its own, as `vllm bench serve` is.

    result = await run_in_process(ep, requests, arrivals, progress=tick, timeout_s=60)

`run_benchmark` itself, with the same arguments and the same `RunResult`, in a child Python
(`python -m infra_agent.serving.loadgen.process`) started for each run: thousands of requests'
streams, parsing and timers then load that process's loop, not the MCP server's, so the
server's other calls still answer during a large benchmark (issue 36: a `list_kernels` poller
waited up to 8 s while the generator shared the server's loop), and the server's own pauses
(other calls, a garbage collection, a relayed progress message) no longer read as latency.

The hand-off is pickled dataclasses over the child's pipes, each frame a 4-byte length and
a pickle: the child says `Ready` on stdout once imported; the `LoadJob` goes in on stdin (a
`LoadProcess` may be started ahead and given its job later); `ProgressLine`s come out as
requests end (the parent awaits `progress` for each, in order), then the `RunResult` (or
`LoadFailed`), last. The records' times are `time.perf_counter` in the child:
CLOCK_MONOTONIC, the same clock in every process of the host, so they compare with the
parent's. `client_cpu_wait_s` is the child's own generator thread's wait for a CPU
(run_benchmark reads /proc/thread-self).

The child never outlives its run: cancelling `run_in_process` (a cancelled tool call, a
timeout) kills it and waits for it, a child started but never given a job ends with its
`LoadProcess`, and a child whose parent died reads EOF on its stdin and exits. Both sides run
the same package, so the child is this interpreter, on this package.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .arrivals import Arrivals
from .client import Endpoint
from .datasets import BenchRequest
from .runner import Progress, RunResult, no_gc_pauses, run_benchmark

_LENGTH = 4  # bytes of a frame's length, big-endian
# What the child's environment adds to ours. Its numpy (percentiles, arrival draws) needs no BLAS
# thread pool, whose threads spin up beside the engine the run measures on a small host: ~0.1 s
# of CPU per start (bench/loadgen_start.py).
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1"}
STDERR_TAIL_BYTES = 4000  # of the child's stderr, kept for the error when it dies


class LoadGeneratorError(RuntimeError):
    """The load generator's process ended without a result (killed, crashed)."""


@dataclass(frozen=True)
class LoadJob:
    """One run_benchmark call, whole: what the child runs."""

    endpoint: Endpoint
    requests: list[BenchRequest]
    arrivals: Arrivals
    options: dict[str, Any] = field(default_factory=dict)  # run_benchmark's keyword arguments


@dataclass(frozen=True)
class Ready:
    """The child's first frame: its imports are done and it waits for its job."""


@dataclass(frozen=True)
class ProgressLine:
    """One call of run_benchmark's `progress` in the child."""

    done: float
    total: float | None
    message: str


@dataclass(frozen=True)
class LoadFailed:
    """run_benchmark raised: its exception (a picklable one; else a RuntimeError with its text)."""

    error: BaseException


def _frame(obj: object) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(_LENGTH, "big") + data


async def _read_frame(stream: asyncio.StreamReader) -> object | None:
    """The next frame's object; None at the end of the stream."""
    try:
        size = int.from_bytes(await stream.readexactly(_LENGTH), "big")
        return pickle.loads(await stream.readexactly(size))
    except asyncio.IncompleteReadError:
        return None


async def run_in_process(
    ep: Endpoint,
    requests: list[BenchRequest],
    arrivals: Arrivals,
    *,
    progress: Progress | None = None,
    **options: Any,
) -> RunResult:
    """run_benchmark(ep, requests, arrivals, progress=progress, **options) in a child process
    started for this run; its progress is awaited here as it comes. Cancelled: the child is
    killed (its requests end with it)."""
    async with await LoadProcess.start() as generator:
        return await generator.run(ep, requests, arrivals, progress=progress, **options)


class LoadProcess:
    """A load generator's process, started ahead of its one run: `start()` returns once its
    interpreter and imports are ready (0.5-1 s on a 2-core host), so a run that must begin at
    once (a profiling window's load) does not spend that time inside what it times.

        async with await LoadProcess.start() as generator:
            ...  # open the window
            result = await generator.run(ep, requests, arrivals)

    Leaving the block ends the process: waited for after its run, killed during one (a cancel)
    or when it never ran."""

    def __init__(self, proc: asyncio.subprocess.Process, stderr: asyncio.Future[str]):
        self._proc, self._stderr, self._ran = proc, stderr, False

    @property
    def pid(self) -> int:
        return self._proc.pid

    @classmethod
    async def start(cls) -> LoadProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            __name__,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **CHILD_ENV},
            limit=1 << 24,  # a RunResult of thousands of records is one frame
        )
        assert proc.stdout is not None and proc.stderr is not None
        generator = cls(proc, asyncio.ensure_future(_tail(proc.stderr)))
        try:
            if not isinstance(await _read_frame(proc.stdout), Ready):
                raise await generator._died("before it was ready")
        except BaseException:
            await generator.aclose()
            raise
        return generator

    async def run(
        self,
        ep: Endpoint,
        requests: list[BenchRequest],
        arrivals: Arrivals,
        *,
        progress: Progress | None = None,
        **options: Any,
    ) -> RunResult:
        """run_benchmark(ep, requests, arrivals, progress=progress, **options) in this process;
        its progress is awaited here as it comes. Once per process."""
        if self._ran:
            raise RuntimeError("a LoadProcess runs one benchmark; start another")
        self._ran = True
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        # stdin stays open: its EOF tells the child that we are gone
        proc.stdin.write(_frame(LoadJob(ep, list(requests), arrivals, options)))
        await proc.stdin.drain()
        while True:
            msg = await _read_frame(proc.stdout)
            if isinstance(msg, ProgressLine):
                if progress is not None:
                    await progress(msg.done, msg.total, msg.message)
            elif isinstance(msg, RunResult):
                return msg
            elif isinstance(msg, LoadFailed):
                raise msg.error
            else:
                raise await self._died("before its result")

    async def _died(self, when: str) -> LoadGeneratorError:
        code = await self._proc.wait()
        return LoadGeneratorError(
            f"the load generator's process (pid {self._proc.pid}) ended with exit code {code} "
            f"{when}; its stderr ends:\n{(await self._stderr)[-STDERR_TAIL_BYTES:]}"
        )

    async def aclose(self, kill: bool = True) -> None:
        """End the process (killed unless `kill` is False: after its run it ends by itself)."""
        proc = self._proc
        if proc.returncode is None:
            assert proc.stdin is not None
            proc.stdin.close()
            if kill:  # no request outlives a cancelled or failed run, and one never run ends here
                proc.kill()
            await asyncio.shield(proc.wait())
        self._stderr.cancel()

    async def __aenter__(self) -> LoadProcess:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.aclose(kill=exc_type is not None or not self._ran)


async def _tail(stream: asyncio.StreamReader) -> str:
    tail = b""
    while chunk := await stream.read(65536):
        tail = (tail + chunk)[-STDERR_TAIL_BYTES:]
    return tail.decode(errors="replace")


# --- the child -------------------------------------------------------------------------------


def _read_job(stdin) -> LoadJob | None:
    """The job; None when the parent closed our stdin without one (it never ran us)."""
    head = stdin.read(_LENGTH)
    if len(head) < _LENGTH:
        return None
    job = pickle.loads(stdin.read(int.from_bytes(head, "big")))
    if not isinstance(job, LoadJob):
        raise TypeError(f"expected a LoadJob on stdin, got {type(job).__name__}")
    return job


async def _child(job: LoadJob, out_fd: int) -> None:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(out_fd, "wb", buffering=0)
    )
    out = asyncio.StreamWriter(transport, protocol, None, loop)

    async def progress(done: float, total: float | None, message: str) -> None:
        out.write(_frame(ProgressLine(done, total, message)))  # buffered: never waits on the parent

    run = asyncio.ensure_future(
        run_benchmark(job.endpoint, job.requests, job.arrivals, progress=progress, **job.options)
    )
    parent_gone = asyncio.ensure_future(_eof(sys.stdin.fileno()))
    await asyncio.wait({run, parent_gone}, return_when=asyncio.FIRST_COMPLETED)
    if not run.done():  # the parent died: nobody reads the result
        run.cancel()
        os._exit(1)
    parent_gone.cancel()
    try:
        reply: object = run.result()
    except Exception as exc:  # noqa: BLE001  (handed to the parent, which raises it)
        try:
            pickle.dumps(exc)
            reply = LoadFailed(exc)
        except Exception:  # noqa: BLE001
            reply = LoadFailed(RuntimeError(f"{type(exc).__name__}: {exc}"))
    # drain() waits only for the buffer to fall below its high-water mark: at 0 it returns once
    # everything is in the pipe (a RunResult is larger than the pipe, and the process ends next)
    transport.set_write_buffer_limits(high=0)
    out.write(_frame(reply))
    await out.drain()
    out.close()


async def _eof(fd: int) -> None:
    """Returns when `fd` (the parent's end of our stdin) reads end of file."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    while await reader.read(4096):
        pass


def main() -> None:
    # The frames own the real stdout; anything else printed goes to stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    os.write(out_fd, _frame(Ready()))
    job = _read_job(sys.stdin.buffer)
    if job is None:
        return
    with no_gc_pauses():
        asyncio.run(_child(job, out_fd))


def generator_pids(parent: int) -> list[int]:
    """The live load-generator processes (this module run as a child) whose parent is `parent`:
    what a test or the eval's busy neighbour (server/eval/neighbour.py) finds to stop or pin."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z" and __name__.encode() in cmdline:
            found.append(int(entry.name))
    return found


if __name__ == "__main__":  # run as its own module, so that pickles name its classes alike
    import importlib

    importlib.import_module(__spec__.name).main()
