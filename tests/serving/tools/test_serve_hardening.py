"""Issue 27's serving reproductions through the in-memory MCP client: each one a clean tool
error or a correct answer, nothing left running, and the server answers the next call."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ToolCallError, call

from infra_agent.tools.common import seeds

pytestmark = pytest.mark.anyio

LEAK = ["/bin/sh", "-c", "od -An -tx1 /model/.infra-agent/seed-secret | tr -d ' \\n'; "
        "od -An -tx1 /model/seed-secret | tr -d ' \\n'; ls -R /model | head -50; exit 1"]


async def _error(client, tool: str, **args) -> str:
    with pytest.raises(ToolCallError) as info:
        await call(client, tool, **args)
    text = str(info.value)
    assert "internal error" not in text, text
    return text


async def test_a_model_folder_never_shows_the_state_folder(client, server, workspace):
    state = server.state.workspace.state_dir
    seeds.trial_seed(state, "e0", 0, 0)  # the per-workspace secret exists
    secret = (state / seeds.SECRET_NAME).read_bytes().hex()
    (workspace / "rootlink").symlink_to(workspace)
    (workspace / "hostroot").symlink_to("/")
    (workspace / "statelink").symlink_to(state)
    models = [".", "./", "kernels/..", "models/../", "rootlink", str(workspace), "statelink",
              ".infra-agent", str(state), "hostroot", "/"]
    for model in models:
        args = {"model": model, "command": LEAK}
        text = await _error(client, "launch_serve", engine="command", args=args, ready_timeout_s=20)
        assert secret not in text, (model, text)
        assert re.search("state folder|outside the workspace", text), (model, text)
        text = await _error(client, "serve_benchmark", engine="command", args=args,
                            workload={"num_requests": 1, "warmup": 0}, repeats=1)
        assert secret not in text, (model, text)
        assert re.search("state folder|outside the workspace", text), (model, text)
    rows = server.state.ledger.query(limit=100)
    assert secret not in json.dumps(rows)
    assert (await call(client, "list_serves"))["serves"] == []


async def test_the_engine_view_masks_the_state_folder_inside_a_model_folder(server, workspace):
    """Below the tools' refusal: an engine started on a folder that holds the state folder
    (as no tool allows) still finds it empty, as a job does."""
    from infra_agent.serving.adapters import CommandAdapter, EngineArgs
    from infra_agent.serving.lifecycle import EngineError

    state = server.state.workspace.state_dir
    seeds.trial_seed(state, "e0", 0, 0)
    secret = (state / seeds.SECRET_NAME).read_bytes().hex()
    engines = server.state.engines
    if not engines.sandbox.isolation.sandboxed:
        pytest.skip("no bubblewrap: nothing is masked without it (tools refuse the folder)")
    with pytest.raises(EngineError) as info:
        await engines.launch(CommandAdapter(), EngineArgs(model=str(workspace), command=LEAK), ready_timeout_s=20)
    assert "/model:" in str(info.value) and secret not in str(info.value)
    assert engines.list() == []
