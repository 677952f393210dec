"""The engine on its own thread, for an asyncio web server.

One thread ("engine-loop") owns the LLMEngine: it drains a command inbox (add, abort,
start/stop profile), runs `step()` while there is work, and hands each output to the
asyncio queue of its request. HTTP handlers only ever talk to the inbox, so the
bookkeeping stays single-threaded. A step's outputs cross to the asyncio loop in one
wake-up, and a request's consumer takes everything that piled up since it last looked as one
merged output (vLLM's output collector does the same): a client that falls behind gets fewer,
larger chunks instead of a backlog that costs one SSE event per token.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import gc
import json
import queue
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from .llm_engine import LLMEngine, RequestOutput
from .metrics import EngineMetrics
from .sequence import SamplingParams


class AsyncEngine:
    def __init__(self, engine: LLMEngine, profile_dir: str | None = None):
        self.engine = engine
        self.metrics = EngineMetrics(engine.model_name)
        self.profile_dir = profile_dir
        if profile_dir is not None:
            _warm_profiler()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._streams: dict[str, _Stream] = {}
        self._profiler = None
        self._export: concurrent.futures.Future | None = (
            None  # the last window's export, off the loop
        )
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="engine-loop", daemon=True)
        self._thread.start()

    # -- the asyncio side -------------------------------------------------------------------
    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        """Outputs of one request until it finishes. If the consumer stops early (a client
        disconnect cancels it), the request is aborted and its blocks freed."""
        stream = _Stream(asyncio.get_running_loop())
        self._streams[request_id] = stream
        self._send(("add", prompt_ids, params, request_id, time.monotonic()))
        finished = False
        try:
            while not finished:
                items = await stream.take()
                errors = [i for i, item in enumerate(items) if isinstance(item, Exception)]
                if errors and not errors[0]:
                    raise items[0]
                out = _merged(items[: errors[0]] if errors else items)
                finished = out.finished
                yield out
                if errors:
                    raise items[errors[0]]
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                self._send(("abort", request_id))

    async def call(self, command: str, *args):
        """Run a command on the engine thread and wait for its answer (profiling)."""
        fut = asyncio.get_running_loop().create_future()
        self._send((command, fut, asyncio.get_running_loop(), *args))
        return await fut

    def shutdown(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=10)
        if hasattr(self.engine, "shutdown"):  # disaggregated mode: its worker threads
            self.engine.shutdown()

    def _send(self, command: tuple) -> None:
        self._inbox.put(command)
        self._wake.set()

    # -- the engine thread ------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping:
            self._drain_inbox()
            if not self.engine.has_work():
                self.metrics.update_gauges(self.engine)  # aborts change them without a step
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:  # a broken kernel must fail its requests, not hang them
                self._fail_all(exc)
                continue
            self.metrics.on_step(self.engine, outputs)
            self._deliver_all([(out.request_id, out) for out in outputs])

    def _drain_inbox(self) -> None:
        while True:
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                return
            kind = command[0]
            if kind == "add":
                _, ids, params, request_id, arrival = command
                try:
                    self.engine.add_request(ids, params, request_id, arrival_time=arrival)
                except ValueError as exc:
                    self._deliver(request_id, exc)
            elif kind == "abort":
                seq = self.engine.abort(command[1])
                if seq is not None:
                    self.metrics.on_finished(seq)
            else:
                _, fut, loop, *args = command
                try:
                    result = getattr(self, "_" + kind)(*args)
                    loop.call_soon_threadsafe(fut.set_result, result)
                except Exception as exc:
                    loop.call_soon_threadsafe(fut.set_exception, exc)

    def _deliver(self, request_id: str, item) -> None:
        self._deliver_all([(request_id, item)])

    def _deliver_all(self, items: list[tuple[str, object]]) -> None:
        """Hand outputs (or exceptions) to their streams: one thread-safe wake-up per event
        loop per step, not one per token (each wake-up is a write to the loop's self-pipe)."""
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for request_id, item in items:
            stream = self._streams.get(request_id)
            if stream is not None:
                by_loop.setdefault(stream.loop, []).append((stream, item))
        for loop, batch in by_loop.items():
            loop.call_soon_threadsafe(_put_all, batch)

    def _fail_all(self, exc: Exception) -> None:
        for request_id in list(self._streams):
            seq = self.engine.abort(request_id)
            if seq is not None:
                self.metrics.on_finished(seq)
            self._deliver(
                request_id, RuntimeError(f"the engine step failed: {type(exc).__name__}: {exc}")
            )

    # -- profiling (runs on the engine thread, so the trace sees the engine's ops) ----------
    # The same recording window as the profile tool's sandbox op (sandbox/worker/recorder.py):
    # torch.profiler on every thread, the named ranges, thread names and CPU times, written as
    # raw JSON that tools/profile judges like a job's result; the torch trace is kept beside it.
    def _start_profile(self) -> str:
        from ...sandbox.worker.recorder import Window

        if self.profile_dir is None:
            raise ValueError("profiling is off: start the engine with --profile-dir DIR")
        if self._profiler is not None:
            raise ValueError("a profile is already running: POST /stop_profile first")
        if self._export is not None and not self._export.done():
            raise ValueError(
                "the previous window is still being exported (it goes on after a client gave "
                "up waiting); POST /start_profile again when /stop_profile's export is done"
            )
        self._profiler = Window(self.engine.runner.device.type)
        self._profiler.start()
        return "started"

    def _stop_profile(self) -> concurrent.futures.Future:
        """Close the window here (torch.profiler started on this thread) and export it on a thread of
        its own: the export takes seconds per second of busy window, and the engine keeps serving."""
        if self._profiler is None:
            raise ValueError("no profile is running: POST /start_profile first")
        window, self._profiler = self._profiler, None
        started = time.monotonic()
        window.close()
        closed_s = time.monotonic() - started
        self._export = concurrent.futures.Future()
        threading.Thread(  # the window in a list the export empties: the thread keeps its args
            target=self._export_window,
            args=([window], closed_s, self._export),
            name="profile-export",
            daemon=True,
        ).start()
        return self._export

    def _export_window(
        self, holder: list, closed_s: float, done: concurrent.futures.Future
    ) -> None:
        self._export_files(holder.pop(), closed_s, done)  # the window and its events die with it
        _release_freed_memory()

    def _export_files(self, window, closed_s: float, done: concurrent.futures.Future) -> None:
        try:
            started = time.monotonic()
            folder = Path(self.profile_dir)
            folder.mkdir(parents=True, exist_ok=True)
            stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns() % 10**6}"
            trace = folder / f"engine-trace-{stamp}.json"
            raw = window.export(folder, keep_trace=trace)
            profile = folder / f"profile-{stamp}.json"
            profile.write_text(json.dumps(raw))
            done.set_result(
                {
                    "trace": str(trace),
                    "profile": str(profile),
                    "close_s": closed_s,
                    "export_s": time.monotonic() - started,
                }
            )
        except Exception as exc:  # the window is gone either way; say why its file is missing
            done.set_exception(
                ValueError(f"exporting the window failed: {type(exc).__name__}: {exc}")
            )

    async def stop_profile(self) -> dict:
        """Close the window and wait for its export (a client that gives up leaves it running)."""
        export = await self.call("stop_profile")
        return await asyncio.wrap_future(export)


def _release_freed_memory() -> None:
    """Give the memory a window's export freed back to the system. A window holds millions of small
    objects made on several threads; freed, glibc keeps their pages in its arenas, so the engine's
    resident memory stayed at its peak after each export and the next window grew from there (a
    2.5 s window then a 0.5 s one crossed the engine's 6.3 GB ceiling: the kernel killed it).
    malloc_trim(0) returns the free pages; on a libc without it (musl) this does nothing."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _warm_profiler() -> None:
    """Start and stop torch.profiler once, at launch: the first start in a process imports and
    initialises its machinery for seconds with the GIL held (measured 4-20 s on a busy 2-core host),
    which would otherwise land in the first /start_profile, next to a profiling window."""
    import torch

    from ...sandbox.worker import recorder  # noqa: F401

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        torch.zeros(1).add_(1)


class _Stream:
    """One request's outputs on their way to its consumer (touched only on the asyncio loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.items: list = []  # RequestOutput or Exception, in step order
        self.ready = asyncio.Event()

    async def take(self) -> list:
        """Everything delivered since the last take (at least one item)."""
        await self.ready.wait()
        self.ready.clear()
        items, self.items = self.items, []
        return items


def _put_all(batch: list[tuple[_Stream, object]]) -> None:
    for stream, item in batch:
        stream.items.append(item)
        stream.ready.set()


def _merged(items: list) -> RequestOutput:
    """Outputs of one request from consecutive steps as one: texts and token ids joined, the
    last one's finish state."""
    if len(items) == 1:
        return items[0]
    return replace(
        items[-1],
        text_delta="".join(o.text_delta for o in items),
        token_ids_delta=[t for o in items for t in o.token_ids_delta],
        inter_token_latency_s=items[0].inter_token_latency_s,
    )
