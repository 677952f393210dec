"""The report live at /ui on `infra-agent serve --http`: the static site's pages, made from
the ledger at each request (they follow the night as experiments land; the index reloads
itself every REFRESH_S), read-only (GET only), behind the server's bearer token
(server/http.py wraps every path) and the same Host/Origin checks as /mcp (the settings
object /mcp gets)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Callable

import anyio.to_thread
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ..context import ARTIFACT_NAME
from .model import Filters, load_report
from .pages import artifact_file
from .render import Renderer

UI_PATH = "/ui"
REFRESH_S = 30  # the index reloads itself: a night's page left open follows it
# The pages need nothing from elsewhere: the browser is told so, and blocks anything else.
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; img-src 'self' data:",
}


def ui_app(state_dir: Callable[[], Path], security: TransportSecuritySettings | None) -> Starlette:
    """`state_dir` is asked at each request: the server may reload its workspace."""
    guard = TransportSecurityMiddleware(security)

    async def page(request: Request) -> Response:
        refused = await guard.validate_request(request, is_post=False)
        if refused is not None:
            return refused
        return await anyio.to_thread.run_sync(_answer, state_dir(), request)

    paths = [
        "",
        "/",
        "/index.html",
        "/index-{number:int}.html",
        "/experiments/{experiment_id}.html",
        "/artifacts/{experiment_id}/{name}",
    ]
    return Starlette(routes=[Route(UI_PATH + p, page, methods=["GET"]) for p in paths])


def _answer(state_dir: Path, request: Request) -> Response:
    params = request.path_params
    if request.url.path == UI_PATH:
        return RedirectResponse(UI_PATH + "/")  # the pages' relative links start below /ui/
    if "name" in params:
        return _artifact(state_dir, params["experiment_id"], params["name"])
    renderer = Renderer(load_report(state_dir, Filters()), refresh_s=REFRESH_S)
    if "experiment_id" in params:
        exp = renderer.report.by_id.get(params["experiment_id"])
        if exp is None:
            return _not_found(f"no experiment {params['experiment_id']!r} in the ledger")
        return HTMLResponse(renderer.experiment(exp, site=None), headers=HEADERS)
    try:
        return HTMLResponse(renderer.index(params.get("number", 1)), headers=HEADERS)
    except IndexError:
        return _not_found(f"the report has {len(renderer.pages)} index page(s)")


def _artifact(state_dir: Path, experiment_id: str, name: str) -> Response:
    if not (ARTIFACT_NAME.match(experiment_id) and ARTIFACT_NAME.match(name)):
        return _not_found("not an artifact name")
    path = artifact_file(state_dir, experiment_id, name)
    if not path.is_file():
        return _not_found(f"no artifact {name!r} of {experiment_id} (pruned, or never made)")
    return FileResponse(path, headers=HEADERS)


def _not_found(why: str) -> Response:
    return HTMLResponse(
        f"<p>{html.escape(why)}; <a href='{UI_PATH}/'>the report's index</a></p>",
        404,
        headers=HEADERS,
    )
