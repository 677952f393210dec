"""What trying layouts by default costs: a default check_numerics of zoo kernels with the
default layouts (padded_rows on the smallest shape of each dtype) vs `layouts=[]`, the
two interleaved A B B A in one run on one warm server, wall time per call and the ratio.

    python bench/layouts_check_numerics.py [kernel ...]     # default: vector_add rmsnorm
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client

from infra_agent.kernels.workspace import EMBEDDED_ROOT
from infra_agent.server.app import build_server

ROUNDS = 2  # A B B A per round


async def timed(client, kernel: str, layouts: list[str] | None) -> tuple[float, int, str]:
    args = {"kernel": kernel} if layouts is None else {"kernel": kernel, "layouts": layouts}
    t0 = time.perf_counter()
    result = await client.call_tool("check_numerics", args)
    seconds = time.perf_counter() - t0
    out = result.structured_content or {}
    return seconds, len(out.get("cases", [])), str(out.get("verdict"))


async def main(kernels: list[str]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-layouts-"))
    root = tmp / "ws"
    shutil.copytree(EMBEDDED_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    srv = build_server(root)
    try:
        async with Client(srv) as client:
            print(f"{'kernel':12} {'without_s':>9} {'with_s':>7} {'ratio':>6} cases  verdicts")
            for kernel in kernels:
                await timed(client, kernel, [])  # warm: zygote, Triton cache, imports
                times: dict[str, list[float]] = {"without": [], "with": []}
                cases, verdicts = {}, set()
                for _ in range(ROUNDS):
                    for arm in ("without", "with", "with", "without"):
                        s, n, v = await timed(client, kernel, [] if arm == "without" else None)
                        times[arm].append(s)
                        cases[arm] = n
                        verdicts.add(f"{arm}:{v}")
                a, b = statistics.median(times["without"]), statistics.median(times["with"])
                print(
                    f"{kernel:12} {a:9.2f} {b:7.2f} {b / a:6.2f} {cases['without']}->{cases['with']}"
                    f"  {sorted(verdicts)}"
                )
    finally:
        await srv.aclose()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or ["vector_add", "rmsnorm"]))
