"""Artifacts written off the reply's path: a plot made for a person need not hold up the call.

Drawing a PNG with matplotlib costs 0.1-0.3 s, more than the rest of a warm one-case check.
A tool hands `CallContext.artifact_later` a function that makes the file's bytes; the URI is
in the reply at once, the ledger row lists it as before, and one background thread (so plots
never draw concurrently: pyplot is not thread-safe) writes the file under a temporary name,
then renames it, so no reader sees half a file. Every read through the server (the
artifact:// resource, `CallContext.read_artifact`) waits for the file first; a new call waits
for all of them before it starts (an agent's next call comes seconds later, when they are long
done; without the wait a plot could share the CPU with a benchmark's timed requests), and so
does shutdown, so a one-shot `infra-agent call` leaves its files behind.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from ..tools.common.plot_thread import draw

log = logging.getLogger("infra_agent.server")


class LateArtifacts:
    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None  # started on first use, stopped by close()
        self._lock = threading.Lock()
        self._pending: dict[Path, Future] = {}
        self._failed: dict[Path, str] = {}  # path -> why it was not written (kept for readers)

    def submit(self, path: Path, make: Callable[[], bytes]) -> None:
        """Write `make()` to `path` in the background."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="late-artifact")
            future = self._pool.submit(self._write, path, make)
            self._pending[path] = future
        future.add_done_callback(lambda done: self._forget(path, done))

    def is_pending(self, path: Path | None = None) -> bool:
        """Whether `path` (or, without one, any file) is still being made."""
        with self._lock:
            return path in self._pending if path is not None else bool(self._pending)

    def wait(self, path: Path) -> str | None:
        """Block until `path` is written; why it could not be, or None."""
        with self._lock:
            future = self._pending.get(path)
        if future is not None:
            future.exception()  # waits; the error itself was logged and kept by _write
        with self._lock:
            return self._failed.get(path)

    def wait_all(self) -> None:
        with self._lock:
            futures = list(self._pending.values())
        for future in futures:
            future.exception()

    def close(self) -> None:
        """Finish every pending file, then stop the thread (a later submit starts another)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _write(self, path: Path, make: Callable[[], bytes]) -> None:
        try:
            data = draw(make)  # plots: on the one plot thread (plot_thread.py)
            partial = path.with_name(f".{path.name}.partial")
            partial.write_bytes(data)
            os.replace(partial, path)
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            log.exception("artifact %s could not be made", path)
            with self._lock:
                self._failed[path] = why
            raise

    def _forget(self, path: Path, done: Future) -> None:
        with self._lock:
            if self._pending.get(path) is done:
                del self._pending[path]
