"""One server for the profile tests (a zygote per test would cost seconds each), on a workspace
holding the episode fixtures and the native wait compiled from C at test time."""

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import copy_zoo

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def profile_workspace(tmp_path_factory):
    root = copy_zoo(tmp_path_factory.mktemp("profile"))
    shutil.copy(FIXTURES / "episode.py", root / "episode.py")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the native fixture (apt-get install gcc)")
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            str(root / "libnative_wait.so"),
            str(FIXTURES / "native_wait.c"),
        ],
        check=True,
    )
    return root


@pytest.fixture(scope="module")
async def profile_server(profile_workspace):
    from infra_agent.server.app import build_server

    server = build_server(profile_workspace)
    yield server
    await server.aclose()


@pytest.fixture(scope="module")
async def profile_client(profile_server):
    from mcp import Client

    async with Client(profile_server) as client:
        yield client
