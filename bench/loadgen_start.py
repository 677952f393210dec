"""CPU and wall time of starting the load generator's process (every serve_benchmark repeat starts
one), with its child environment as shipped vs without it (`process.CHILD_ENV` emptied: numpy's
OpenBLAS starts its thread pool, one thread per core).

`LoadProcess.start()` until the child says Ready, then its close; the CPU is the reaped child's
(getrusage of this process's children). Sides alternate start by start, so a drift of this shared
host reaches both. Prints each side's median wall and mean CPU per start, and their ratios.

    python bench/loadgen_start.py [--starts 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time

from infra_agent.serving.loadgen import process


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


async def one_start(env: dict[str, str]) -> tuple[float, float]:
    process.CHILD_ENV = env
    cpu0, t0 = _children_cpu_s(), time.perf_counter()
    generator = await process.LoadProcess.start()
    wall = time.perf_counter() - t0
    await generator.aclose()
    return wall, _children_cpu_s() - cpu0


async def main(starts: int) -> None:
    shipped = dict(process.CHILD_ENV)
    sides: dict[str, dict[str, str]] = {"without CHILD_ENV": {}, "as shipped": shipped}
    walls: dict[str, list[float]] = {name: [] for name in sides}
    cpus: dict[str, list[float]] = {name: [] for name in sides}
    await one_start(shipped)  # the interpreter's files into the page cache
    for _ in range(starts):
        for name, env in sides.items():
            wall, cpu = await one_start(env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    print(f"load generator process start, {starts} a side (load {os.getloadavg()[0]:.1f}):")
    for name in sides:
        print(
            f"  {name:18s} wall p50 {statistics.median(walls[name]) * 1e3:6.1f} ms, "
            f"CPU {statistics.fmean(cpus[name]) * 1e3:6.1f} ms per start"
        )
    before, after = (statistics.fmean(cpus[n]) for n in sides)
    print(f"  CPU ratio {before / after:.2f}x less as shipped")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=20)
    asyncio.run(main(ap.parse_args().starts))
