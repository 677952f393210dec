"""Does the load generator distort what it measures? Against a server that answers at
once (in another process), our generator at a stated rate vs bare httpx loops sending
the same requests at the same scheduled times, side by side in one run, in alternating
order (a burst of load from the other agents on this shared host hits every variant).

A server that does no work makes TTFT the transport floor plus whatever the client adds.
Every variant uses one definition: TTFT = first SSE data line (the server's first chunk
carries text) minus the *scheduled* send time (vllm#54101). The floors are plain loops,
one request at a time, nothing but `client.stream` and finding the first data line:

- floor_spin: busy-waits through every gap (it owns a core while it waits);
- floor_idle: sleeps until each scheduled time as the generator does (`sleep_until`);
- floor_idle_new_conn: floor_idle with a new TCP connection per request, which is what
  the generator did before the fix (it left each stream at [DONE], before the body's
  end, and httpx closed the connection): the cost of the cause, measured live.

The generator runs as `run_benchmark` with its default (idle between sends, spinning
the last 1.5 ms) and with `spin_s=1.0` (busy like floor_spin). Printed: per repeat and
variant, TTFT p50/p90, the rate requests were really sent at over the scheduled rate,
and new TCP connections per request (counted by the server); then, per pair and
statistic, the median over repeats of the difference (ms) and ratio, with their range.

    flock /tmp/team/bench.lock .venv/bin/python bench/loadgen_overhead.py [--rate 50] [--requests 250]
        [--repeats 5] [--pin] [--uvloop]   # --pin: server on CPU 1, client on CPU 0
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
import numpy as np

from infra_agent.serving.lifecycle import free_port
from infra_agent.serving.loadgen import Arrivals, BenchRequest, Endpoint, run_benchmark, sleep_until

BODY = {"model": "m", "prompt": "x", "max_tokens": 4, "stream": True}
PAIRS = [
    ("generator", "floor_idle", "same waiting as the generator's default"),
    ("generator_spin", "floor_spin", "both spin through the gaps"),
    ("generator", "floor_spin", "the generator idles, the floor spins"),
    ("floor_idle_new_conn", "floor_idle", "the cause: a new TCP connection per request"),
]
HISTORY = """\
cause of the old overhead (issue 13): the client left each stream at [DONE], before the body's end, so httpx
closed the connection and every request paid a new TCP connect inside its TTFT (floor_idle_new_conn - floor_idle
above is that cost, measured live). Fixed: the client reads each stream to its end and keeps the connection.
recorded before the fix (old client.py, this bench, 5 repeats of 250 at 50 req/s, load 1.07): generator - floor_idle
p50 +1.151 ms (1.25x), p90 +3.153 ms (1.51x); generator - floor_spin p50 +1.988 ms (1.55x); 0.82-1.00 new
connections per request. With this bench's first version (spinning floor timed from its actual send): +3.990 ms p50.
what an idling client still pays against a spinning floor is the host's scheduling, not client work: it shrinks
when client and server cannot share a core (--pin); it is under 1 ms when the generator spins too (spin_s)."""


def serve(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    client_ports: set[int] = set()  # one entry per TCP connection the server has accepted

    def chunk(text: str | None, usage: dict | None = None) -> str:
        choices = [{"index": 0, "text": text}] if text is not None else []
        return (
            "data: "
            + json.dumps({"choices": choices, **({"usage": usage} if usage else {})})
            + "\n\n"
        )

    async def completions(request):
        client_ports.add(request.client.port)
        await request.body()

        async def gen():
            for t in ("a", "b", "c", "d"):
                yield chunk(t)
            yield chunk(None, {"prompt_tokens": 4, "completion_tokens": 4})
            yield "data: [DONE]\n\n"

        return StreamingResponse(gen(), media_type="text/event-stream")

    async def connections(request):
        return JSONResponse({"connections": len(client_ports)})

    app = Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/connections", connections),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


async def busy_wait_until(t: float) -> None:
    while time.perf_counter() < t:  # blocks the loop on purpose: the floor has nothing else to do
        pass


async def floor(
    url: str, offsets_s: list[float], wait, keepalive: bool = True
) -> tuple[list[float], list[float]]:
    """One request at a time at the scheduled times; (TTFTs, actual send times), seconds."""
    ttfts, sends = [], []
    limits = httpx.Limits(max_keepalive_connections=None if keepalive else 0)
    async with httpx.AsyncClient(base_url=url, limits=limits) as client:
        start = time.perf_counter() + 0.01
        for off in offsets_s:
            await wait(start + off)
            sends.append(time.perf_counter())
            async with client.stream("POST", "/v1/completions", json=BODY) as resp:
                first = None
                async for line in resp.aiter_lines():
                    if first is None and line.startswith("data:"):
                        first = time.perf_counter()
            ttfts.append(first - (start + off))
    return ttfts, sends


async def generator(url: str, offsets_s: list[float], arrivals: Arrivals, spin_s: float | None):
    kwargs = {} if spin_s is None else {"spin_s": spin_s}
    result = await run_benchmark(
        Endpoint(url, model="m"),
        [BenchRequest("x", 1, 4)] * len(offsets_s),
        arrivals,
        warmup=[BenchRequest("x", 1, 4)] * 5,
        **kwargs,
    )
    if result.metrics.failed:
        raise SystemExit(f"the generator failed requests: {result.metrics.errors}")
    return [r.ttft_s for r in result.records], [r.sent_s for r in result.records]


VARIANTS = {
    "floor_spin": lambda url, offs, arr: floor(url, offs, busy_wait_until),
    "floor_idle": lambda url, offs, arr: floor(url, offs, sleep_until),
    "floor_idle_new_conn": lambda url, offs, arr: floor(url, offs, sleep_until, keepalive=False),
    "generator": lambda url, offs, arr: generator(url, offs, arr, None),
    "generator_spin": lambda url, offs, arr: generator(url, offs, arr, 1.0),
}


async def connections(url: str) -> int:
    async with httpx.AsyncClient(base_url=url) as client:
        return (await client.get("/connections")).json()["connections"]


async def one_repeat(url: str, rate: float, n: int, seed: int, order: list[str]) -> dict[str, dict]:
    arrivals = Arrivals(rate=rate, seed=seed)
    offs = arrivals.offsets_s(n)
    out = {}
    for name in order:
        before = await connections(url)
        ttfts, sends = await VARIANTS[name](url, offs, arrivals)
        new_conns = await connections(url) - before - 1  # minus the counting request's own
        ms = np.asarray(ttfts) * 1e3
        out[name] = {
            "p50": float(np.median(ms)),
            "p90": float(np.percentile(ms, 90)),
            "rate_ratio": ((n - 1) / (max(sends) - min(sends))) / ((n - 1) / offs[-1]),
            "conns_per_req": new_conns / n,
        }
    return out


def report(rows: list[dict[str, dict]], rate: float, n: int) -> None:
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(
        f"client loop: {loop}; load average now {os.getloadavg()[0]:.2f} (2 shared cores: every number scales "
        f"with it); {len(rows)} repeats of {n} requests at {rate:g} req/s (Poisson), order alternating"
    )
    for i, row in enumerate(rows):
        print(f"repeat {i + 1}:")
        for name, v in row.items():
            print(
                f"  {name:20s} TTFT p50 {v['p50']:6.3f} ms  p90 {v['p90']:6.3f} ms  sent at "
                f"{v['rate_ratio']:.3f}x the scheduled rate  new connections/request {v['conns_per_req']:.2f}"
            )
    print("difference (ms) and ratio per statistic, median over repeats [min, max]:")
    for a, b, why in PAIRS:
        cells = []
        for stat in ("p50", "p90"):
            diffs = [r[a][stat] - r[b][stat] for r in rows]
            ratios = [r[a][stat] / r[b][stat] for r in rows]
            cells.append(
                f"{stat} {statistics.median(diffs):+.3f} ms [{min(diffs):+.3f}, {max(diffs):+.3f}] "
                f"{statistics.median(ratios):.2f}x"
            )
        print(f"  {a} - {b} ({why}): " + "; ".join(cells))
    print("goal: generator - floor under 1 ms at p50 (like with like: the first two pairs)")
    print(HISTORY)


def wait_ready(port: int, timeout_s: float = 30) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the trivial server did not start")


async def main(rate: float, n: int, repeats: int, pin: bool) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)] + (["--pin"] if pin else [])
    )
    if pin:
        os.sched_setaffinity(0, {0})
    try:
        wait_ready(port)
        url = f"http://127.0.0.1:{port}"
        await floor(url, [0.0] * 20, busy_wait_until)  # warm both processes up
        names = list(VARIANTS)
        rows = [
            await one_repeat(url, rate, n, seed=i, order=names if i % 2 == 0 else names[::-1])
            for i in range(repeats)
        ]
    finally:
        proc.terminate()
        proc.wait(10)
    report(rows, rate, n)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--requests", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pin", action="store_true", help="server on CPU 1, client on CPU 0")
    parser.add_argument(
        "--uvloop", action="store_true", help="run the client on uvloop (pip install uvloop)"
    )
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        if args.pin:
            os.sched_setaffinity(0, {1})
        serve(args.serve)
    elif args.uvloop:
        import uvloop

        uvloop.run(main(args.rate, args.requests, args.repeats, args.pin))
    else:
        asyncio.run(main(args.rate, args.requests, args.repeats, args.pin))
