"""The local executor on a multi-GPU host: every timing or run job pinned to one GPU, a timing job
alone on its GPU, run jobs spread over the GPUs. The host here has no GPU, so the locks are
driven directly, and one Sandbox is told it has two GPUs to show the pin reaching the job."""

from __future__ import annotations

import asyncio

from sandbox_helpers import TEST_LIMITS, LoopThread, make_workspace

from infra_agent.sandbox import Job, Sandbox
from infra_agent.sandbox.slots import DeviceLocks


async def _hold(locks: DeviceLocks, exclusive: bool, seconds: float, log: list) -> None:
    async with locks.hold(exclusive) as gpu:
        log.append(
            ("start", "timing" if exclusive else "run", gpu, asyncio.get_running_loop().time())
        )
        await asyncio.sleep(seconds)
        log.append(
            ("end", "timing" if exclusive else "run", gpu, asyncio.get_running_loop().time())
        )


def _overlaps(log: list) -> list[tuple]:
    """Pairs of holds on one GPU that overlapped in time, with at least one timing job."""
    spans = []
    for event, kind, gpu, t in log:
        if event == "start":
            spans.append([kind, gpu, t, None])
        else:
            next(s for s in spans if s[1] == gpu and s[0] == kind and s[3] is None)[3] = t
    return [
        (a, b)
        for i, a in enumerate(spans)
        for b in spans[i + 1 :]
        if a[1] == b[1] and "timing" in (a[0], b[0]) and a[2] < b[3] and b[2] < a[3]
    ]


def test_run_jobs_spread_over_the_gpus_and_a_timing_job_is_alone_on_its_gpu():
    async def scenario():
        locks, log = DeviceLocks(2), []
        await asyncio.gather(
            _hold(locks, False, 0.2, log),
            _hold(locks, False, 0.2, log),
            _hold(locks, True, 0.1, log),  # waits for a GPU with no run job on it
            _hold(locks, True, 0.1, log),
            _hold(locks, False, 0.1, log),
        )
        return log

    log = asyncio.run(scenario())
    starts = [(kind, gpu) for event, kind, gpu, _ in log if event == "start"]
    assert starts[:2] == [("run", 0), ("run", 1)]  # the first two run jobs: one per GPU
    assert not _overlaps(log), log
    assert sum(1 for event, *_ in log if event == "end") == 5


def test_the_pin_reaches_the_job(tmp_path):
    sb = Sandbox(
        make_workspace(tmp_path), tmp_path / "state", allow_unsandboxed=True, limits=TEST_LIMITS
    )
    sb.num_gpus, sb._devices = 2, DeviceLocks(2)  # as on a two-GPU host (the job stays on the CPU)
    source = "import os\ndef main():\n    return os.environ.get('CUDA_VISIBLE_DEVICES')\n"
    runner = LoopThread()
    try:

        async def jobs():
            probe = {"source": source, "entry": "main"}
            return await asyncio.gather(
                sb.run(Job(op="probe", payload=probe, kind="timing")),
                sb.run(Job(op="probe", payload=probe, kind="run")),
                sb.run(Job(op="probe", payload=probe, kind="compile")),
            )

        timing, run, compile_ = runner.call(jobs())
        assert timing.ok and run.ok and compile_.ok, (timing.error, run.error, compile_.error)
        assert {timing.result["value"], run.result["value"]} == {"0", "1"}
        assert not compile_.result["value"]  # compiles are not pinned to a device
    finally:
        runner.call(sb.aclose())
        runner.stop()
