"""Does the load generator distort what it measures? Against a server that answers at
once (in another process), our generator at a stated rate vs a bare httpx loop sending
the same requests, side by side in one run.

A server that does no work makes TTFT the transport floor plus whatever the client
adds. The bare loop (one request at a time at the same scheduled times, a busy wait
for each, timer around `client.stream`, no SSE bookkeeping beyond finding the first
data line) is the floor: an idle gap before each request costs the server a wake-up
either way, so both must see the same gaps. Our generator's overhead is its TTFT
minus the floor's. Prints, per round (the two
alternate), the rate requests were really sent at over the rate they were scheduled
at, both TTFT p50s and their difference and ratio; then the median overhead. The load average is
printed because this machine is shared: every number scales with it.

    python bench/loadgen_overhead.py [--rate 50] [--requests 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx

from infra_agent.serving.loadgen import Arrivals, BenchRequest, Endpoint, run_benchmark


def serve(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    def chunk(text: str | None, usage: dict | None = None) -> str:
        choices = [{"index": 0, "text": text}] if text is not None else []
        return "data: " + json.dumps({"choices": choices, **({"usage": usage} if usage else {})}) + "\n\n"

    async def completions(request):
        await request.body()

        async def gen():
            for t in ("a", "b", "c", "d"):
                yield chunk(t)
            yield chunk(None, {"prompt_tokens": 4, "completion_tokens": 4})
            yield "data: [DONE]\n\n"

        return StreamingResponse(gen(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


async def bare_ttfts(url: str, offsets_s: list[float]) -> list[float]:
    """The floor: one request at a time at the same scheduled times, timer around the stream."""
    out = []
    body = {"model": "m", "prompt": "x", "max_tokens": 4, "stream": True}
    async with httpx.AsyncClient(base_url=url) as client:
        start = time.perf_counter()
        for off in offsets_s:
            while time.perf_counter() < start + off:  # a busy wait: the floor has nothing else to do
                pass
            t0 = time.perf_counter()
            async with client.stream("POST", "/v1/completions", json=body) as resp:
                first = None
                async for line in resp.aiter_lines():
                    if first is None and line.startswith("data:"):
                        first = time.perf_counter() - t0
                out.append(first)
    return out


def wait_ready(port: int, timeout_s: float = 30) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the trivial server did not start")


async def main(rate: float, n: int, rounds: int) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        wait_ready(port)
        url = f"http://127.0.0.1:{port}"
        await bare_ttfts(url, [0.0] * 20)  # warm both paths
        ep = Endpoint(url, model="m")
        reqs = [BenchRequest("x", 1, 4)] * n
        rows = []
        for i in range(rounds):  # alternate, so a burst of load from elsewhere hits both
            arrivals = Arrivals(rate=rate, seed=i)
            bare_p50 = statistics.median(await bare_ttfts(url, arrivals.offsets_s(n))) * 1e3
            scheduled_s = arrivals.offsets_s(n)[-1]
            result = await run_benchmark(ep, reqs, arrivals, warmup=5)
            rows.append((bare_p50, result, (n - 1) / scheduled_s))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"load average {os.getloadavg()[0]:.2f}; {rounds} rounds of {n} requests each")
    for bare_p50, result, scheduled_rate in rows:
        m = result.metrics
        achieved = (m.completed - 1) / (max(r.sent_s for r in result.records) - min(r.sent_s for r in result.records))
        print(f"  sent {achieved:.1f} req/s of {scheduled_rate:.1f} scheduled ({achieved / scheduled_rate:.3f}x), "
              f"failed {m.failed}, client wait p50 {m.client_wait_ms.median:.3f} ms; TTFT p50 generator "
              f"{m.ttft_ms.median:.3f} ms vs bare loop {bare_p50:.3f} ms: {m.ttft_ms.median - bare_p50:+.3f} ms "
              f"({m.ttft_ms.median / bare_p50:.2f}x)")
    overhead = statistics.median(r.metrics.ttft_ms.median - b for b, r, _ in rows)
    print(f"median over rounds: client-side TTFT overhead {overhead:+.3f} ms p50 (goal: under 1 ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
    else:
        asyncio.run(main(args.rate, args.requests, args.rounds))
