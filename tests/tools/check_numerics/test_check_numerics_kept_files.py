"""The reference job's files check_numerics keeps while its cases run: removed when the call
ends, and, when its server was killed mid-call, by the next call on the workspace."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import call

from infra_agent.kernels.workspace import load_workspace
from infra_agent.tools.check_numerics import KEEP_PARENT, KEEP_PREFIX

# A server whose check_numerics call is mid-cases when the test kills it: the candidate sleeps.
SERVER_MID_CHECK = textwrap.dedent("""
    import sys, anyio
    from mcp import Client
    from infra_agent.server import app

    SLOW = "import time\\ndef add(x, y):\\n    time.sleep(600)\\n    return x + y\\n"

    async def main():
        server = app.build_server(sys.argv[1])
        async with Client(server) as client:
            await client.call_tool("check_numerics", {"kernel": "vector_add", "source": SLOW, "entry": "add"})

    anyio.run(main)
""")


@pytest.mark.anyio
async def test_a_server_killed_mid_check_leaves_its_references_for_the_next_call_to_remove(
    workspace, client
):
    keep_root = load_workspace(workspace).state_dir / KEEP_PARENT
    proc = subprocess.Popen([sys.executable, "-c", SERVER_MID_CHECK, str(workspace)])
    try:
        deadline = time.monotonic() + 240
        while not (left := sorted(keep_root.glob(f"{KEEP_PREFIX}{proc.pid}-*"))):
            assert proc.poll() is None, "the server ended before its check kept anything"
            assert time.monotonic() < deadline, "the check kept no reference files in 240 s"
            time.sleep(0.2)
        assert any(left[0].iterdir()), left  # the reference job's inputs and outputs
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert left[0].is_dir()  # the witness: a killed server cannot clean up after itself

    out = await call(client, "check_numerics", kernel="vector_add")
    assert out["verdict"] == "pass", out["summary"]
    assert not left[0].exists()  # removed by this call, its server being gone
    assert list(keep_root.iterdir()) == []  # and this call's own, when it ended
