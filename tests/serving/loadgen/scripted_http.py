"""A real HTTP server for the load generator's tests: a Starlette app under uvicorn on a free
loopback port, in a thread of the test process."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route


@contextmanager
def serving(*routes: Route) -> Iterator[str]:
    """Serve `routes` on 127.0.0.1 until the block ends; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=list(routes)), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)
