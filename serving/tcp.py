"""The one way we open a listening TCP socket: the MCP server's --http transport
(server/http.py) and the built-in engine (serving/engine/__main__.py) both bind with it.
It lives in serving/ because the server may import serving, never the other way round."""

from __future__ import annotations

import socket

# How long an engine keeps an idle keep-alive connection, s (uvicorn's default, and vLLM's, is 5):
# the built-in engine's uvicorn and vLLM's (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, adapters/vllm.py). A
# client's own idle expiry (the load generator's KEEPALIVE_EXPIRY_S, 2 s) starts when it has read a
# response, which on a loaded host can be seconds after the engine sent it: measured, a load
# generator sent its next request on a connection 5.0-5.7 s after the engine's last byte on it,
# just as uvicorn closed it, and 11 of 2,000 requests the engine never saw failed with "Server
# disconnected without sending a response". An idle connection costs the engine one socket; the
# client closes its pool.
KEEP_ALIVE_S = 60


def listen_socket(host: str, port: int, nodelay: bool = True) -> socket.socket:
    """A bound TCP socket whose accepted connections send each write at once (TCP_NODELAY).

    Bound before anything is announced, so a busy port is a clear OSError, not a URL printed for
    a server that never came up.

    asyncio sets TCP_NODELAY on an accepted connection only when the listening socket's proto is
    IPPROTO_TCP; `socket.socket(AF_INET)` has proto 0, and then Nagle's algorithm holds every SSE
    chunk after the first until the client's delayed ACK (~40 ms on Linux): measured, a closed
    loop's TTFT p50 43 ms for an engine TTFT of 8 ms, and a request's tokens arriving in one burst.
    `nodelay=False` (the engine's bench-only --no-tcp-nodelay) serves as before that fix.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP if nodelay else 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(
        socket.IPPROTO_TCP, socket.TCP_NODELAY, int(nodelay)
    )  # Linux: accepted ones inherit it
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock
