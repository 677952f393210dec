"""One MCP server per replay module, as one agent session would hold it: the replay's calls share
its warm sandbox and its experiment ledger (a later call names an earlier one as its baseline).

Not a conftest.py: a conftest here would shadow tests/conftest.py for `from conftest import call`.
"""

import shutil

import pytest

from infra_agent.kernels.workspace import EMBEDDED_ROOT


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def case_workspace(tmp_path_factory):
    """A fresh copy of the built-in zoo: the replay's workspace."""
    root = tmp_path_factory.mktemp("case_study") / "ws"
    shutil.copytree(EMBEDDED_ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


@pytest.fixture(scope="module")
async def agent(case_workspace):
    """An in-memory MCP client on the replay's workspace."""
    from mcp import Client

    from infra_agent.server.app import build_server

    server = build_server(case_workspace)
    async with Client(server) as client:
        yield client
    await server.aclose()


def answers(out: dict) -> dict[str, str]:
    """What the tool said about each expect condition: {condition: supported|contradicted|inconclusive}."""
    return {c["condition"]: c["answer"] for c in out["hypothesis_answer"]["conditions"]}
