"""A sandboxed vLLM's session at nice 0 (as before) and at nice 5 (ServiceSpec.nice), side by
side in one run: does the load generator get a CPU, and do its numbers agree with vLLM's own?

    .venv/bin/python bench/engine_priority.py [--rounds 4] [--runs 4]

Needs vLLM's CPU build in .cache/vllm (`make vllm`) and root (or the engine's owner) to write
the engine session's autogroup nice back to 0. One vLLM engine (--enforce-eager, a tiny
checkpoint with head_dim 32) started by launch_serve in a temporary workspace; then rounds
that alternate the nice of its session (written to /proc/<engine host>/autogroup: the kernel
shares CPU between sessions by that nice when autogroups are on), each round `--runs` runs of
16 requests x 16 tokens, 4 in flight, through the sandbox's bridge. Per run: the client's
TTFT p50 and ITL p50, vLLM's own TTFT p50 and mean inter-token gap (its histograms scraped
around the run), the client's CPU wait (the kernel's account of its thread) as a share of the
run, and whether the run was a burst (client ITL p50 under a quarter of vLLM's gap).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from mcp import Client

from infra_agent.kernels.workspace import EMBEDDED_ROOT
from infra_agent.server.app import build_server
from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint
from infra_agent.serving.loadgen import (
    Arrivals,
    Endpoint,
    PlainTokenizer,
    random_requests,
    run_benchmark,
)
from infra_agent.tools.serve_benchmark.engine_truth import BURST_RATIO, engine_side
from infra_agent.tools.serve_benchmark.phases import parse

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".cache" / "vllm" / "bin" / "python"
CHECKPOINT = dict(hidden_size=128, num_heads=4, num_kv_heads=2, intermediate_size=256)


def engine_host_pid(socket_path: str) -> int:
    """The engine host (it holds the session bwrap made) of the engine behind `socket_path`."""
    folder = Path(socket_path).resolve().parent.name
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "ia_worker.engine_host" in cmdline and folder in cmdline and "bwrap" not in cmdline:
            return int(proc.name)
    raise SystemExit(f"no engine host for {folder}")


async def one_run(socket_path: str, tokenizer, seed: int) -> dict:
    requests = random_requests(16, 16, 16, seed=seed, tokenizer=tokenizer)
    ep = Endpoint("http://engine", model="/model", uds=socket_path, extra_body={"ignore_eos": True})
    async with ep.client(max_connections=1, timeout_s=60) as http:
        before = parse((await http.get("/metrics")).text)
        result = await run_benchmark(ep, requests, Arrivals(max_concurrency=4))
        after = parse((await http.get("/metrics")).text)
    m, engine = result.metrics, engine_side(before, after)
    wait = result.client_cpu_wait_s
    return {
        "ttft_p50": m.ttft_ms.median,
        "engine_ttft_p50": engine["engine_ttft_p50_ms"],
        "itl_p50": m.itl_ms.median,
        "engine_itl_mean": engine["engine_itl_mean_ms"],
        "cpu_wait_pct": None if wait is None else 100 * wait / result.duration_s,
        "burst": m.itl_ms.median < BURST_RATIO * (engine["engine_itl_mean_ms"] or 0),
    }


async def main(rounds: int, runs: int) -> None:
    if not VLLM_PYTHON.exists():
        raise SystemExit(f"{VLLM_PYTHON} is missing: run `make vllm` first")
    root = Path(tempfile.mkdtemp())
    ws = root / "ws"
    shutil.copytree(EMBEDDED_ROOT, ws, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build_tiny_checkpoint(ws / "tiny32", byte_alphabet=False, **CHECKPOINT)
    config = ws / "infra-agent.toml"
    config.write_text(config.read_text() + f'\n[engines.vllm]\npython = "{VLLM_PYTHON}"\n')
    tokenizer = PlainTokenizer(ws / "tiny32")
    rows: dict[int, list[dict]] = {0: [], 5: []}
    srv = build_server(ws)
    try:
        async with Client(srv) as c:
            started = await c.call_tool(
                "launch_serve",
                {
                    "engine": "vllm",
                    "args": {"model": "tiny32", "extra_args": ["--enforce-eager"]},
                    "ready_timeout_s": 400,
                },
            )
            if started.is_error:
                raise SystemExit(f"launch_serve failed: {started.content}")
            socket_path = started.structured_content["socket"]
            group = Path(f"/proc/{engine_host_pid(socket_path)}/autogroup")
            for i in range(rounds):
                for nice in (0, 5) if i % 2 == 0 else (5, 0):
                    group.write_text(str(nice))
                    for j in range(runs):
                        rows[nice].append(await one_run(socket_path, tokenizer, 100 * i + j))
                    print(f"round {i + 1}/{rounds}, nice {nice}: done", file=sys.stderr)
    finally:
        await srv.aclose()
        shutil.rmtree(root, ignore_errors=True)
    print(f"vLLM CPU build, 16 requests x 16 tokens, 4 in flight, {rounds * runs} runs per nice;")
    print("median [min, max] over runs (ms, %)\n")
    keys = ("ttft_p50", "engine_ttft_p50", "itl_p50", "engine_itl_mean", "cpu_wait_pct")
    print("| engine session | bursty runs | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 2) + "|")
    for nice, runs_ in rows.items():
        cells = [_cell([r[k] for r in runs_ if r[k] is not None]) for k in keys]
        bursts = sum(r["burst"] for r in runs_)
        print(f"| nice {nice} | {bursts}/{len(runs_)} | " + " | ".join(cells) + " |")
    ratio = statistics.median(r["ttft_p50"] for r in rows[0]) / statistics.median(
        r["ttft_p50"] for r in rows[5]
    )
    print(f"\nclient TTFT p50, nice 0 / nice 5: {ratio:.2f}x")


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.runs))
