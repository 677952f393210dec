"""What the client measures of a real engine process agrees with what the engine measured
itself (issue 21): closed loops of 1 and 4 streams through the project's load generator,
against the engine's own /metrics scraped around them. Also: the default engine (no
checkpoint) streams its text token by token.

The engine's TCP_NODELAY is read from the engine process's own accepted connections
(pidfd_getfd: a duplicate of the engine's socket, the engine being this test's child), so it
is the option the engine really serves with, deterministic on any load. The latency bounds
are behaviour, not speed: the client's TTFT p50 may be at most twice the top of the engine's
p50 bucket plus four HTTP exchanges measured at the same time on the same engine (/health,
one write, so it never waits on Nagle) plus 10 ms, and chunks may not arrive much closer
together than the engine made the tokens.

Bounds from bench/engine_client_gap.py (24 x 16 tokens, this 2-core host shared by 8): at load
4, with TCP_NODELAY, client TTFT p50 13.9 ms (1 in flight; engine p50 4.1, bucket top 5,
/health 4.2) and 61 ms (4 in flight; engine 18.5, top 20, /health 8.3): bounds 37 and 83 ms;
without it 49 ms at 1 in flight (bound 29 ms) and ITL p50 0.07 ms against the engine's 3.6 ms.
At load 8-10 every number was 3-5x larger (the engine's HTTP thread waits for a CPU), the
stall hidden in it; the TCP_NODELAY assertion decides there.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

import httpx
import pytest

from infra_agent.sandbox import CpuAccount
from infra_agent.serving.loadgen import (
    Arrivals,
    Endpoint,
    PlainTokenizer,
    random_requests,
    run_benchmark,
)
from infra_agent.tools.serve_benchmark.engine_truth import BURST_RATIO, engine_side
from infra_agent.tools.serve_benchmark.phases import parse

pytestmark = pytest.mark.slow
SYS_PIDFD_GETFD = 438  # the same number on x86_64 and aarch64


def start_engine(argv: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra_agent.serving.engine", "--port", "0", *argv],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if match := re.search(r"ready at (http://\S+)", line):
            return proc, match.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"the engine {argv} did not report readiness")


def connected_tcp_nodelay(pid: int) -> list[int]:
    """TCP_NODELAY of every connected TCP socket of process `pid`, read on duplicates of them."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd, values = os.pidfd_open(pid), []
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                continue
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "pidfd_getfd")
            sock = socket.socket(fileno=fd)
            try:
                if (
                    sock.family in (socket.AF_INET, socket.AF_INET6)
                    and sock.type == socket.SOCK_STREAM
                ):
                    sock.getpeername()  # raises for the listening socket
                    values.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            except OSError:
                pass
            finally:
                sock.close()
    finally:
        os.close(pidfd)
    return values


@pytest.fixture(scope="module")
def tiny_engine(tiny_checkpoint):
    proc, url = start_engine(
        ["--checkpoint", str(tiny_checkpoint), "--model-name", "tiny", "--num-blocks", "512"]
    )
    yield proc, url, PlainTokenizer(tiny_checkpoint)
    proc.terminate()
    proc.wait(timeout=10)


async def _health_round_trips_ms(url: str, stop: asyncio.Event) -> list[float]:
    """/health round trips on a connection of their own, while the benchmark runs."""
    times = []
    async with httpx.AsyncClient(base_url=url) as http:
        while not stop.is_set():
            t0 = time.perf_counter()
            await http.get("/health")
            times.append(1e3 * (time.perf_counter() - t0))
            await asyncio.sleep(0.02)
    return times


@pytest.mark.parametrize("concurrency", [1, 4])
def test_client_ttft_and_itl_agree_with_the_engine_own(tiny_engine, concurrency):
    proc, url, tokenizer = tiny_engine

    async def measure():
        requests = random_requests(24, 32, 16, seed=concurrency, tokenizer=tokenizer)
        ep = Endpoint(url, model="tiny", extra_body={"ignore_eos": True})
        async with httpx.AsyncClient(base_url=url) as http:
            before = parse((await http.get("/metrics")).text)
            stop = asyncio.Event()
            probe = asyncio.ensure_future(_health_round_trips_ms(url, stop))
            run = asyncio.ensure_future(
                run_benchmark(
                    ep,
                    requests,
                    Arrivals(max_concurrency=concurrency),
                    warmup=random_requests(2, 32, 16, seed=99, tokenizer=tokenizer),
                    tokenizer=tokenizer,
                )
            )
            await asyncio.sleep(0.5)
            nodelay = await asyncio.to_thread(
                connected_tcp_nodelay, proc.pid
            )  # mid-run: the client's are open
            result = await run
            stop.set()
            rtts = await probe
            after = parse((await http.get("/metrics")).text)
        waited = f"{result.client_cpu_wait_s} s of {result.duration_s:.2f} s"
        return result.metrics, engine_side(before, after), nodelay, rtts, waited

    m, engine, nodelay, rtts, waited = asyncio.run(measure())
    assert m.completed == 24 and m.failed == 0
    # the load generator's connection(s), the probe's and the scrape's
    assert len(nodelay) >= 2 and all(nodelay), f"accepted connections' TCP_NODELAY: {nodelay}"
    floor_ms = statistics.median(rtts)
    bound = 2 * engine["engine_ttft_p50_high_ms"] + 4 * floor_ms + 10.0
    assert m.ttft_ms.median <= bound, (
        f"client TTFT p50 {m.ttft_ms.median:.1f} ms over 2 x the engine's "
        f"{engine} + 4 x /health {floor_ms:.1f} ms + 10 ms (the client waited for a CPU "
        f"{waited})"
    )
    assert m.itl_ms.median >= BURST_RATIO * engine["engine_itl_mean_ms"], (
        f"a burst: client ITL p50 {m.itl_ms.median:.3f} ms, engine {engine['engine_itl_mean_ms']:.3f} ms"
    )


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_default_engine_streams_text_token_by_token(temperature):
    """No checkpoint: random weights and the byte tokenizer. Its text must stream (issue 21: most
    bytes it sampled were no complete UTF-8 character, the detokeniser held them back, and each
    request arrived as one chunk, TTFT = E2EL): content chunks >= half the output tokens."""
    proc, url = start_engine(["--num-blocks", "64"])
    try:
        body = {
            "prompt": "Hello",
            "max_tokens": 32,
            "stream": True,
            "ignore_eos": True,
            "temperature": temperature,
            "seed": 1,
            "stream_options": {"include_usage": True},
        }
        chunks, usage, text = 0, None, ""
        before, started = CpuAccount.of({proc.pid}), time.monotonic()
        with (
            httpx.Client(base_url=url, timeout=120) as http,
            http.stream("POST", "/v1/completions", json=body) as response,
        ):
            for line in response.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                usage = event.get("usage") or usage
                for choice in event["choices"]:
                    chunks += bool(choice["text"])
                    text += choice["text"]
        after, wall_s = CpuAccount.of({proc.pid}), time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert usage["completion_tokens"] == 32
    assert "\ufffd" not in text and text.isascii()
    assert before is not None and after is not None
    waited_s = after.waited_s - before.waited_s
    if waited_s > 0.25 * wall_s:
        # The engine's threads waited for a CPU (two hogs beside the suite: 11 chunks of 32
        # tokens): tokens made while its HTTP loop waited go out merged, as vLLM merges them. The
        # bug this guards (one chunk a request) still shows: the text must come in pieces.
        assert chunks >= 2, (chunks, text, after.words())
    else:
        assert chunks >= 16, (chunks, text, f"waited for a CPU {waited_s:.2f} s of {wall_s:.2f} s")
