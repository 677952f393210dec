"""The load generator in a process of its own (issue 36, item 1): the same run_benchmark, its
records and progress handed back typed, and no child outlives its run.

A scripted server in a thread of this process streams known chunks (as in
test_loadgen_client.py), stamping each send on this process's clock: the child's records are
compared with those stamps, so the clocks of the two processes are checked to be one."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import process_gone
from scripted_http import serving
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from infra_agent.serving.loadgen import Arrivals, BenchRequest, Endpoint, RequestRecord, RunResult
from infra_agent.serving.loadgen.process import LoadProcess, generator_pids, run_in_process

SENT: dict[str, list[float]] = {}
HANGING: set[str] = set()  # prompts of requests whose stream never ends


def _chunk(choices, usage=None):
    msg = {"id": "x", "object": "text_completion", "choices": choices}
    if usage is not None:
        msg["usage"] = usage
    return f"data: {json.dumps(msg)}\n\n"


async def completions(request: Request):
    prompt = (await request.json())["prompt"]

    async def gen():
        times = SENT.setdefault(prompt, [])
        times.append(time.perf_counter())
        yield _chunk([{"index": 0, "text": "ab"}])
        if prompt.startswith("hang"):
            HANGING.add(prompt)
            await asyncio.sleep(3600)
        await asyncio.sleep(0.02)
        times.append(time.perf_counter())
        yield _chunk([{"index": 0, "text": "c", "finish_reason": "length"}])
        yield _chunk([], {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8})
        yield "data: [DONE]\n\n"

    return StreamingResponse(gen(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def scripted_server():
    with serving(Route("/v1/completions", completions, methods=["POST"])) as url:
        yield url


@pytest.mark.anyio
async def test_the_child_runs_the_same_generator_and_hands_back_typed_records(scripted_server):
    ep = Endpoint(scripted_server, model="tiny")
    reqs = [BenchRequest(f"same{i}", 5, 3) for i in range(4)]
    seen: list[tuple[float, float | None, str]] = []

    async def progress(done, total, message):
        seen.append((done, total, message))

    result = await run_in_process(ep, reqs, Arrivals(max_concurrency=2), progress=progress)
    assert isinstance(result, RunResult)
    assert result.generator_pid != os.getpid()  # another process sent them
    assert result.metrics.completed == 4 and result.metrics.failed == 0
    # every request's progress, in order, before the result
    assert [(d, t) for d, t, _ in seen] == [(i, 4) for i in range(1, 5)]
    assert all(m.endswith("ok") for *_, m in seen)
    for req, rec in zip(reqs, result.records, strict=True):
        assert isinstance(rec, RequestRecord)
        first, last = SENT[req.prompt]
        # the child's clock is this process's: each chunk arrived after the server sent it
        assert rec.scheduled_s <= first <= rec.content_times_s[0]
        assert last <= rec.content_times_s[1] == rec.last_chunk_s
        assert (rec.text, rec.output_tokens, rec.output_tokens_source) == ("abc", 3, "usage")
    # the kernel's account of the child's own thread, not of this one (None without schedstat)
    assert result.client_cpu_wait_s is None or result.client_cpu_wait_s >= 0
    assert not generator_pids(os.getpid())


@pytest.mark.anyio
async def test_the_generators_errors_are_raised_here(scripted_server):
    ep = Endpoint(scripted_server, model="tiny")
    with pytest.raises(ValueError, match="closed loop"):
        await run_in_process(ep, [BenchRequest("e", 5, 3)], Arrivals(rate=5.0), send_for_s=0.3)
    assert not generator_pids(os.getpid())


@pytest.mark.anyio
async def test_cancelling_the_run_kills_its_process(scripted_server):
    """A cancelled run (a cancelled tool call) ends its process, mid-request."""
    ep = Endpoint(scripted_server, model="tiny")
    run = asyncio.ensure_future(run_in_process(ep, [BenchRequest("hang-cancel", 5, 3)], Arrivals()))
    deadline = time.monotonic() + 60
    while "hang-cancel" not in HANGING and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert "hang-cancel" in HANGING, "the request never reached the server"
    (child,) = generator_pids(os.getpid())
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert process_gone(child, within_s=0)  # killed and reaped before the cancel returned
    assert not generator_pids(os.getpid())


@pytest.mark.anyio
async def test_a_generator_started_ahead_sends_nothing_until_its_run(scripted_server):
    """profile(handle=) starts its load generator before the window opens, so that the process's
    start (0.5-1 s here) is not in the window: `start()` returns once the child is imported and
    waiting; it has sent nothing; its run is the same run; one never given a run ends with its
    block."""
    ep = Endpoint(scripted_server, model="tiny")
    async with await LoadProcess.start() as generator:
        assert generator_pids(os.getpid()) == [generator.pid]
        await asyncio.sleep(0.2)
        assert not [p for p in SENT if p.startswith("ahead")]  # waiting for its job
        result = await generator.run(ep, [BenchRequest("ahead-1", 5, 3)], Arrivals())
        with pytest.raises(RuntimeError, match="one benchmark"):
            await generator.run(ep, [BenchRequest("ahead-2", 5, 3)], Arrivals())
    assert result.metrics.completed == 1 and result.generator_pid == generator.pid
    assert list(SENT["ahead-1"]) and "ahead-2" not in SENT
    assert not generator_pids(os.getpid())
    async with await LoadProcess.start() as idle:
        pass
    assert process_gone(idle.pid, within_s=0)  # never run: ended, and reaped, with its block


@pytest.mark.anyio
async def test_a_ready_generator_runs_no_thread_pool_beside_the_engine():
    """Once imported and waiting, the child is one thread: numpy's OpenBLAS would start a pool
    of one per core (its spin at start is ~0.1 s of CPU per repeat: bench/loadgen_start.py) on
    the cores the engine under test runs on."""
    async with await LoadProcess.start() as generator:
        threads = os.listdir(f"/proc/{generator.pid}/task")
        names = [open(f"/proc/{generator.pid}/task/{t}/comm").read().strip() for t in threads]
        assert len(threads) == 1, names


PARENT = """
import asyncio, sys
from infra_agent.serving.loadgen import Arrivals, BenchRequest, Endpoint
from infra_agent.serving.loadgen.process import run_in_process
asyncio.run(run_in_process(Endpoint(sys.argv[1], model="tiny"), [BenchRequest("hang-orphan", 5, 3)],
                           Arrivals()))
"""


def test_a_generator_whose_parent_died_exits(scripted_server):
    """SIGKILL of the server (nothing of it runs to clean up): its generator sees its stdin close
    and exits instead of sending on for nobody."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, scripted_server])
    try:
        deadline = time.monotonic() + 60
        while "hang-orphan" not in HANGING and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "hang-orphan" in HANGING, "the request never reached the server"
        (child,) = generator_pids(parent.pid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert process_gone(child, within_s=30)


@pytest.mark.anyio
async def test_a_result_larger_than_the_pipe_arrives_whole_while_this_loop_is_busy(
    scripted_server,
):
    """The child writes its result and ends: a RunResult of hundreds of records is larger than the
    pipe holds, and this loop may not read it at once (here: blocked in the last progress call).
    It once lost its end: the child's loop closed with the result still in its write buffer."""
    ep = Endpoint(scripted_server, model="tiny")
    n = 600
    reqs = [BenchRequest(f"big{i}-" + "x" * 200, 5, 3) for i in range(n)]

    async def progress(done, total, message):
        if done == n:
            time.sleep(1.0)  # the child writes its result meanwhile, then ends

    result = await run_in_process(ep, reqs, Arrivals(max_concurrency=64), progress=progress)
    assert len(result.records) == n and result.metrics.completed == n
