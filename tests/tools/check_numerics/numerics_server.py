"""One server for a whole test module: check_numerics tests share its warm sandbox
(a fresh server per test would start a zygote per test)."""

import shutil

import pytest

from infra_agent.kernels.workspace import EMBEDDED_ROOT


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def shared_workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("numerics") / "ws"
    shutil.copytree(EMBEDDED_ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


@pytest.fixture(scope="module")
async def shared_client(shared_workspace):
    from mcp import Client

    from infra_agent.server.app import build_server

    server = build_server(shared_workspace)
    async with Client(server) as client:
        yield client
    await server.aclose()
