"""Streamable HTTP transport: the Starlette app from the MCP SDK at /mcp and the live report
at /ui, behind optional bearer auth, served by uvicorn. DNS-rebinding protection
(Host/Origin checks) is the SDK's, on when binding a loopback address, for both paths."""

from __future__ import annotations

import hmac
import json
import shlex
import socket

import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from rich.console import Console

from . import clients
from .report.live import UI_PATH, ui_app
from .stdio import SHUTDOWN_GRACE_S

LOOPBACK = ("127.0.0.1", "localhost", "::1")
MCP_PATH = "/mcp"


class BearerAuth:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>`."""

    def __init__(self, app, token: str):
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = json.dumps(
                    {
                        "error": "unauthorized",
                        "error_description": "send Authorization: Bearer <token>",
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="infra-agent"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class WithUi:
    """ASGI: /ui and below to the live report (server/report/live.py), the rest (and the
    lifespan) to the MCP app."""

    def __init__(self, mcp_app, ui_app):
        self.mcp_app, self.ui_app = mcp_app, ui_app

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        to_ui = path == UI_PATH or path.startswith(UI_PATH + "/")
        await (self.ui_app if to_ui else self.mcp_app)(scope, receive, send)


def loopback_protection(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection as the SDK switches it on for a loopback bind, made here so
    that /mcp and /ui check Host and Origin with the one same settings object."""
    if host not in LOOPBACK:
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def build_app(server, host: str, token: str | None):
    security = loopback_protection(host)
    mcp_app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, transport_security=security
    )
    app = WithUi(mcp_app, ui_app(lambda: server.state.workspace.state_dir, security))
    return BearerAuth(app, token) if token else app


class _GracefulServer(uvicorn.Server):
    """uvicorn's server, told about our calls: on SIGTERM new calls are refused, running
    ones get `timeout_graceful_shutdown` seconds, then uvicorn cancels them (their rows
    become interrupted), and the sandbox and ledger close before uvicorn re-raises the
    signal (which would end the process before any `finally` of ours ran)."""

    def __init__(self, config: uvicorn.Config, mcp_server):
        super().__init__(config)
        self.mcp_server = mcp_server

    async def shutdown(self, sockets=None) -> None:
        self.mcp_server.state.stopping = True
        try:
            await super().shutdown(sockets)
        finally:
            await self.mcp_server.aclose()


async def serve_http(
    server, sock: socket.socket, token: str | None, grace_s: float = SHUTDOWN_GRACE_S
) -> None:
    host, port = sock.getsockname()[:2]
    app = build_app(server, host, token)
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=grace_s,  # type: ignore[arg-type]  # uvicorn waits on a float too
    )
    uv = _GracefulServer(config, server)
    try:
        await _announce(server, host, port, token)
        await uv.serve(sockets=[sock])
    finally:
        await server.aclose()


async def _announce(server, host: str, port: int, token: str | None) -> None:
    """Tell the person at the terminal (on stderr) where the server is and how to use it."""
    console = Console(stderr=True)
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{port}{MCP_PATH}"
    tools = await server.list_tools()
    ws = server.state.workspace
    console.print(
        f"[bold green]infra-agent[/] serving streamable HTTP at [bold]{url}[/]", highlight=False
    )
    console.print(
        f"workspace: {ws.root}{' (built-in zoo)' if ws.is_embedded else ''}; state: {ws.state_dir}",
        highlight=False,
    )
    console.print(f"{len(tools)} tools: " + ", ".join(t.name for t in tools), highlight=False)
    console.print(
        f"the report, live: http://{shown_host}:{port}{UI_PATH}/ (read-only; the same token)",
        highlight=False,
    )
    if host in LOOPBACK:
        console.print("DNS-rebinding protection: on (Host/Origin must be loopback)")
    else:
        console.print(
            "[yellow]warning:[/] bound to a non-loopback address: DNS-rebinding protection is off"
            + (
                ""
                if token
                else " and no --token is set; anyone who can reach the port can run code"
            )
        )
    console.print(
        "auth: "
        + ("bearer token required" if token else "none (pass --token or INFRA_AGENT_TOKEN)")
    )
    for name in ("claude-code", "cursor", "vscode"):
        console.print(f"\n[bold]{name}[/]:", highlight=False)
        console.print(clients.snippet(name, url=url, token=token), highlight=False, markup=False)
    console.print(
        "\nor let the client start a server of its own over stdio, with this install's command: "
        f"{shlex.join(clients.launch_command())} (`infra-agent config --client NAME` prints that "
        "configuration)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    console.print("\nCtrl-C to stop.")
