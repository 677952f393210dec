"""The client's TTFT and ITL against the built-in engine's own, with TCP_NODELAY on the engine's
accepted sockets and without (as before issue 21), side by side in one run.

    .venv/bin/python bench/engine_client_gap.py [--requests 24] [--output-len 16] [--repeats 3]

One tiny checkpoint (serving/engine/tiny_checkpoint.py), two engine processes: the default
and `--no-tcp-nodelay` (a hidden bench-only flag that makes the listening socket as before).
Closed loops of 1 and 4 streams through the project's load generator; each repeat draws new
prompts (no prefix-cache hits) and the two engines alternate (A B B A ...), so a drifting,
shared host moves both alike. The engine's side comes from its /metrics scraped around each
repeat: TTFT p50 from the histogram's delta (with the bucket it lies in) and the mean
inter-token gap (sum / count, exact). These are the numbers behind engine_truth.py's bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint
from infra_agent.serving.loadgen import (
    Arrivals,
    Endpoint,
    PlainTokenizer,
    random_requests,
    run_benchmark,
)
from infra_agent.tools.serve_benchmark.engine_truth import engine_side
from infra_agent.tools.serve_benchmark.phases import parse


def start_engine(argv: list[str], timeout_s: float = 120) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra_agent.serving.engine", "--port", "0", *argv],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if match := re.search(r"ready at (http://\S+)", line):
            return proc, match.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"the engine {argv} did not start")


async def one_run(
    url: str, tokenizer, concurrency: int, n: int, output_len: int, seed: int
) -> dict:
    requests = random_requests(n, 32, output_len, seed=seed, tokenizer=tokenizer)
    ep = Endpoint(url, model="tiny", extra_body={"ignore_eos": True})
    async with httpx.AsyncClient(base_url=url) as http:
        rtt = await http_round_trip_ms(http)
        before = parse((await http.get("/metrics")).text)
        result = await run_benchmark(
            ep,
            requests,
            Arrivals(max_concurrency=concurrency),
            warmup=random_requests(2, 32, output_len, seed=seed + 1_000_003, tokenizer=tokenizer),
            tokenizer=tokenizer,
        )
        after = parse((await http.get("/metrics")).text)
    m, engine = result.metrics, engine_side(before, after)
    return {
        "ttft_p50": m.ttft_ms.median,
        "itl_p50": m.itl_ms.median,
        "tpot_p50": m.tpot_ms.median,
        "engine_ttft_p50": engine["engine_ttft_p50_ms"],
        "engine_ttft_high": engine["engine_ttft_p50_high_ms"],
        "engine_itl_mean": engine["engine_itl_mean_ms"],
        "health_rtt_p50": rtt,
    }


async def http_round_trip_ms(http: httpx.AsyncClient, n: int = 10) -> float:
    """p50 of GET /health round trips, ms: what one HTTP exchange costs on this host right now."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await http.get("/health")
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


async def main(n: int, output_len: int, repeats: int) -> None:
    folder = build_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny")
    tokenizer = PlainTokenizer(folder)
    common = ["--checkpoint", str(folder), "--model-name", "tiny", "--num-blocks", "512"]
    engines = {
        "nodelay": start_engine(common),
        "stalled": start_engine(common + ["--no-tcp-nodelay"]),
    }
    rows: dict[tuple[str, int], list[dict]] = {}
    try:
        for i in range(repeats):
            for concurrency in (1, 4):
                order = list(engines) if i % 2 == 0 else list(engines)[::-1]
                for name in order:
                    row = await one_run(
                        engines[name][1], tokenizer, concurrency, n, output_len, seed=1000 * i + 7
                    )
                    rows.setdefault((name, concurrency), []).append(row)
    finally:
        for proc, _ in engines.values():
            proc.terminate()
            proc.wait(10)
    print(
        f"{n} requests x {output_len} tokens, closed loop, median over {repeats} repeats [min, max] (ms)"
    )
    keys = (
        "ttft_p50",
        "engine_ttft_p50",
        "engine_ttft_high",
        "itl_p50",
        "engine_itl_mean",
        "tpot_p50",
        "health_rtt_p50",
    )
    print("| socket | in flight | " + " | ".join(keys) + " | client - engine TTFT p50 |")
    print("|---" * (len(keys) + 3) + "|")
    for (name, concurrency), runs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = [_cell([r[k] for r in runs]) for k in keys]
        gap = _cell([r["ttft_p50"] - r["engine_ttft_p50"] for r in runs])
        print(f"| {name} | {concurrency} | " + " | ".join(cells) + f" | {gap} |")


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.output_len, args.repeats))
