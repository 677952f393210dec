"""Cold vs cached compile latency of compile_kernel, end to end through the MCP server.

For each built-in Triton kernel and target: one cold call (fresh compile cache: a
sandbox job that imports the kernel, runs Triton AOT, ptxas/cuobjdump/nvdisasm) and
one cached call (same request, answered from the workspace's compile cache). The
sandbox is started by a warm-up compile that is reported apart. One run, wall-clock.

    python bench/compile_latency.py [--targets sm_90a,gfx942]
"""

from __future__ import annotations

import argparse
import statistics
import time

import anyio
from mcp_session import zoo_session

from infra_agent.kernels.workspace import EMBEDDED_ROOT, load_workspace


async def call(client, **args) -> tuple[float, dict]:
    started = time.perf_counter()
    result = await client.call_tool("compile_kernel", args)
    elapsed = time.perf_counter() - started
    if result.is_error:
        raise SystemExit(f"compile_kernel {args} failed: {result.content[0].text}")
    return elapsed, result.structured_content


async def main(targets: list[str]) -> None:
    kernels = sorted(load_workspace(EMBEDDED_ROOT).kernels)
    async with zoo_session("compile-bench-") as client:
        warmup_s, _ = await call(client, kernel=kernels[0], target="sm_86")
        print(
            f"sandbox start + first compile ({kernels[0]}, sm_86; not in the table): {warmup_s:.2f} s\n"
        )
        print(
            f"{'kernel':<12} {'target':<8} {'cold_s':>8} {'compile_s':>10} {'cached_ms':>10} {'cold/cached':>12}"
        )
        ratios = []
        for kernel in kernels:
            for target in targets:
                cold_s, cold = await call(client, kernel=kernel, target=target)
                cached_s, cached = await call(client, kernel=kernel, target=target)
                assert not cold["cached"] and cached["cached"], (
                    "the second call must come from the cache"
                )
                ratios.append(cold_s / cached_s)
                print(
                    f"{kernel:<12} {target:<8} {cold_s:>8.2f} {cold['compile_s']:>10.2f} "
                    f"{cached_s * 1e3:>10.1f} {cold_s / cached_s:>11.0f}x"
                )
        print(
            f"\nmedian cold/cached ratio: {statistics.median(ratios):.0f}x "
            "(cold_s: whole call incl. sandbox job; compile_s: Triton AOT inside the job)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sm_80,sm_90a,sm_100a,gfx942")
    anyio.run(main, parser.parse_args().targets.split(","))
