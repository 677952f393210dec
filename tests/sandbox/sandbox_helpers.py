"""Helpers and the shared `sandbox` fixture for the sandbox tests.

Not a conftest.py on purpose: other test folders do `from conftest import call`, which
a second conftest module here would shadow. Each test module imports the fixture:

    from sandbox_helpers import sandbox  # noqa: F401  (the fixture)

    def test_x(sandbox):
        res = sandbox.probe("def main():\n    return 1\n")
        assert res.result["value"] == 1

Starting a zygote imports torch (seconds on 2 cores), so every module shares one
sandbox. Its limits are small so each probe hits them fast: 1 GiB of memory, 64
processes, 32 MiB files, 96 MiB per job folder, 1 MiB of output.
"""

from __future__ import annotations

import asyncio
import textwrap
import threading
from pathlib import Path

import pytest

from infra_agent.sandbox import Job, JobResult, Limits, Sandbox

MiB = 1 << 20
TEST_LIMITS = Limits(
    memory_bytes=1024 * MiB,
    num_processes=64,
    file_bytes=32 * MiB,
    disk_bytes=96 * MiB,
    output_bytes=1 * MiB,
)


class LoopThread:
    """Runs coroutines on one long-lived loop: the zygote dies with the thread that started it."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="sandbox-loop", daemon=True
        )
        self.thread.start()

    def call(self, coro, timeout_s: float = 120.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class SandboxHandle:
    def __init__(self, sandbox: Sandbox, runner: LoopThread):
        self.sb = sandbox
        self.runner = runner

    def run(self, job: Job, progress=None) -> JobResult:
        return self.runner.call(self.sb.run(job, progress), timeout_s=job.timeout_s + 120)

    def probe(
        self, source: str, *args, entry: str = "main", timeout_s: float = 30.0, env=None
    ) -> JobResult:
        payload = {"source": textwrap.dedent(source), "entry": entry, "args": list(args)}
        return self.run(Job(op="probe", payload=payload, timeout_s=timeout_s, env=env or {}))

    def require_layer(self, layer: str) -> None:
        """Skip, saying exactly why, when this host cannot provide the layer a probe relies on."""
        if layer not in self.sb.isolation.layers:
            pytest.skip(
                f"isolation layer {layer!r} is not available on this host: "
                f"{self.sb.isolation.missing.get(layer, 'unknown reason')}"
            )

    def assert_healthy(self) -> None:
        """The next job runs normally."""
        res = self.run(Job(op="noop", payload={"echo": "still here"}))
        assert res.ok, (res.status, res.error, res.stderr_tail)
        assert res.result["echo"] == "still here"


def make_workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / "kernels").mkdir(parents=True)
    (ws / "kernels" / "hello.py").write_text("def hello():\n    return 'hi'\n")
    return ws


_shared: SandboxHandle | None = None


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory, request) -> SandboxHandle:
    """One sandbox for the session, whichever module asks first (each module that imports
    this fixture gets its own definition of it; they all hand out the same sandbox)."""
    global _shared
    if _shared is None:
        root = tmp_path_factory.mktemp("sandbox")
        ws = make_workspace(root)
        runner = LoopThread()
        _shared = SandboxHandle(
            Sandbox(ws, ws / ".infra-agent", allow_unsandboxed=True, limits=TEST_LIMITS), runner
        )

        def close() -> None:
            global _shared
            runner.call(_shared.sb.aclose())
            runner.stop()
            _shared = None

        request.addfinalizer(close)
    return _shared
