"""sweep_kernel's ahead-of-time compile stage: configs compiled in parallel vs one at a time.

A 12-config space of the zoo's rmsnorm (BLOCK_N x num_warps) compiled for sm_90a (no GPU needed),
through the MCP server. The compile stage alone is timed: a constraint no kernel meets drops
every config at compile, so the sweep ends there. Each run gets a fresh copy of the zoo (an empty
compile cache), and the two settings alternate (parallel, serial, parallel, serial, ...), so load
on a shared host hits both alike. The stage's wall time is read from the ledger: the first compile
call's start to the last one's end (experiment://<sweep id> lists the calls).

    .venv/bin/python bench/sweep_compile.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import anyio
from mcp_session import call, zoo_session

from infra_agent.sandbox.runner import Sandbox

SPACE = {"BLOCK_N": [64, 128, 256, 512], "num_warps": [1, 2, 4]}


CAPACITY = Sandbox.capacity


async def stage_seconds(parallel: int) -> tuple[float, int]:
    # the sweep compiles as many at once as the sandbox says it can (Sandbox.capacity)
    Sandbox.capacity = lambda self, kind: parallel if kind == "compile" else CAPACITY(self, kind)  # type: ignore[method-assign]
    async with zoo_session("sweep-compile-") as client:
        out = await call(
            client,
            "sweep_kernel",
            kernel="rmsnorm",
            space=SPACE,
            shapes=[{"M": 4, "N": 64}],
            dtype="float32",
            target="sm_90a",
            constraints=[
                "registers_per_thread < 0"
            ],  # no kernel meets it: the sweep ends at compile
        )
        assert out["compiled"] == 0 and out["tried"] == 12, out["summary"]
        listed = await client.read_resource(f"experiment://{out['experiment_id']}")
        rows = []
        for child in json.loads(listed.contents[0].text)["children"]:
            text = (await client.read_resource(f"experiment://{child['id']}")).contents[0].text
            rows.append(json.loads(text))
        assert all(r["tool"] == "compile_kernel" and r["status"] == "ok" for r in rows)
        assert not any(r["result"]["cached"] for r in rows), "a fresh zoo copy has no cache"
        return max(r["ended_at"] for r in rows) - min(r["started_at"] for r in rows), len(rows)


async def main(rounds: int) -> None:
    parallel = min(2, os.cpu_count() or 1)  # Sandbox.capacity("compile"): 2 compile slots
    print(
        f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; parallel = {parallel} at once"
    )
    times: dict[int, list[float]] = {parallel: [], 1: []}
    for r in range(rounds):
        for n in (parallel, 1):
            seconds, calls = await stage_seconds(n)
            times[n].append(seconds)
            print(f"round {r + 1}: {n} at once: {calls} compiles in {seconds:.2f} s")
    par, ser = statistics.median(times[parallel]), statistics.median(times[1])
    print(
        f"\ncompile stage, 12 configs for sm_90a, median of {rounds}: serial {ser:.2f} s "
        f"[{min(times[1]):.2f}, {max(times[1]):.2f}], {parallel} at once {par:.2f} s "
        f"[{min(times[parallel]):.2f}, {max(times[parallel]):.2f}]: {ser / par:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    anyio.run(main, parser.parse_args().rounds)
