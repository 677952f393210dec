"""One sandbox for the whole folder, driven from a private event-loop thread.

Starting a zygote imports torch (seconds on 2 cores), so the escape and crash suites
share one. Its limits are small so each probe hits them fast: 1 GiB of memory, 64
processes, 32 MiB files, 96 MiB per job folder, 1 MiB of output.

    def test_x(sandbox):
        res = sandbox.probe("def main():\n    return 1\n")
        assert res.result["value"] == 1
"""

from __future__ import annotations

import pytest
from sandbox_helpers import TEST_LIMITS, LoopThread, SandboxHandle, make_workspace

from infra_agent.sandbox import Sandbox


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("sandbox")
    ws = make_workspace(root)
    runner = LoopThread()
    sb = Sandbox(ws, ws / ".infra-agent", allow_unsandboxed=True, limits=TEST_LIMITS)
    handle = SandboxHandle(sb, runner)
    yield handle
    runner.call(sb.aclose())
    runner.stop()
