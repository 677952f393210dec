"""Every matplotlib drawing in the server runs on one long-lived thread.

matplotlib caches its FreeType fonts per thread (`font_manager.get_font` keys its cache on the
thread's id, "to prevent segfaults with multi-threading"), and mathtext's parse cache holds
fonts too. A plot drawn on whichever worker thread is free (anyio's pool starts and retires
threads as calls come and go) loads a fresh set of fonts, about 0.8 MB of native memory each,
that the caches keep until they are full: the server's RSS rose with every plotting call
(issue 36, item 6; bench/server_memory.py). One thread for all plots loads them once; it also
means two plots never draw at the same time (pyplot is not thread-safe).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import anyio

T = TypeVar("T")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None  # started on the first plot, lives as long as the process
_plot_thread_id: int | None = None


def draw(make: Callable[..., T], *args) -> T:
    """`make(*args)` on the plot thread (at once when already on it); blocks until it is done."""
    global _pool
    if threading.get_ident() == _plot_thread_id:
        return make(*args)
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="plot", initializer=_remember_thread
            )
        pool = _pool
    return pool.submit(make, *args).result()


async def draw_async(make: Callable[..., T], *args) -> T:
    """draw() off the event loop, for a tool that awaits its PNG."""
    return await anyio.to_thread.run_sync(draw, make, *args)


def _remember_thread() -> None:
    global _plot_thread_id
    _plot_thread_id = threading.get_ident()
