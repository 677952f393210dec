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
