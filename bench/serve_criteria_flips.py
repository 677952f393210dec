"""How often does `ttft_p50 <= 1.05 * baseline.ttft_p50` flip in A/A, and how often does it
catch a planted prefill regression? Side by side in one run, through the MCP tools an
agent calls, on the built-in engine with a tiny checkpoint built here.

One baseline serve_benchmark (default repeats) on the normal engine; then N A/A runs on
that same engine and N runs on an engine started with --prefill-delay-ms, alternating,
each judged against the baseline. Prints the answer counts of each and the rates: a
false "contradicted" in A/A is a flip (goal: under 5%); "inconclusive" means the repeats
straddled the threshold.

    python bench/serve_criteria_flips.py [--runs 10] [--delay-ms 40] [--requests 64]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import tempfile
from pathlib import Path

from mcp import Client

from infra_agent.kernels.workspace import EMBEDDED_ROOT
from infra_agent.server.app import build_server
from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

CRITERION = "ttft_p50 <= 1.05 * baseline.ttft_p50"


async def call(client, tool, **args) -> dict:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text}")
    return result.structured_content


async def main(runs: int, delay_ms: int, requests: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ia-flips-") as tmp:
        ws = Path(tmp) / "ws"
        shutil.copytree(EMBEDDED_ROOT, ws, ignore=shutil.ignore_patterns("__pycache__"))
        build_tiny_checkpoint(ws / "tiny")
        server = build_server(ws)
        workload = {"num_requests": requests, "input_len": 24, "output_len": 8, "rate": 32.0, "seed": 3}
        try:
            async with Client(server) as c:
                normal = (await call(c, "launch_serve", engine="builtin", args={"model": "tiny"}))["handle"]
                slow = (await call(c, "launch_serve", engine="builtin", args={
                    "model": "tiny", "extra_args": ["--prefill-delay-ms", str(delay_ms)]}))["handle"]
                base = await call(c, "serve_benchmark", handle=normal, workload=workload, repeats=repeats)
                answers = {"A/A": collections.Counter(), f"+{delay_ms} ms prefill": collections.Counter()}
                ratios = {k: [] for k in answers}
                for _ in range(runs):
                    for label, handle in zip(answers, (normal, slow)):
                        out = await call(c, "serve_benchmark", handle=handle, workload=workload, repeats=repeats,
                                         baseline=base["experiment_id"], criteria=[CRITERION])
                        answers[label][out["criteria"]["answer"]] += 1
                        ratios[label].append(out["metrics"]["ttft_p50"] / base["metrics"]["ttft_p50"])
        finally:
            await server.aclose()
    print(f"load average {os.getloadavg()[0]:.2f}; baseline TTFT p50 {base['metrics']['ttft_p50']:.1f} ms; "
          f"{runs} runs each, {repeats} repeats of {requests} requests per run; criterion {CRITERION!r}")
    for label, counts in answers.items():
        r = sorted(ratios[label])
        print(f"  {label:>18}: " + ", ".join(f"{k} {counts[k]}/{runs}" for k in ("supported", "inconclusive",
                                                                              "contradicted"))
              + f"; TTFT p50 ratio median {r[len(r) // 2]:.3f} (min {r[0]:.3f}, max {r[-1]:.3f})")
    flips = answers["A/A"]["contradicted"] / runs
    caught = answers[f"+{delay_ms} ms prefill"]["contradicted"] / runs
    print(f"A/A flip rate {100 * flips:.1f}% (goal < 5%); planted regression caught {100 * caught:.1f}%")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--delay-ms", type=int, default=40)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    asyncio.run(main(a.runs, a.delay_ms, a.requests, a.repeats))
