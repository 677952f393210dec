"""Racing vs timing every config: how much timing sweep_kernel's race spends to find the winner,
against the same sweep with strategy="grid" (every config timed once against the first, at the
race's last-round budget: the precision the race ends at), in one run.

The zoo's rmsnorm over BLOCK_N x num_warps on two CPU shapes (interpreted Triton: a wider block
is more masked work; num_warps changes nothing, so those configs tie). The two strategies
alternate (race, grid, race, grid, ...) on one server. Per sweep: the timing budget it spent
(the sum of its microbench calls' budget_ms) and the wall time of those calls (from the ledger),
and whether the winners agree (a grid winner the race reports as tied with its own counts).

    .venv/bin/python bench/sweep_racing.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import anyio
from mcp_session import call, zoo_session

SPACE = {"BLOCK_N": [64, 128, 256, 512, 1024, 2048], "num_warps": [1, 4]}
SHAPES = [{"M": 4, "N": 64}, {"M": 16, "N": 48}]


async def sweep(client, strategy: str) -> dict:
    out = await call(
        client,
        "sweep_kernel",
        kernel="rmsnorm",
        space=SPACE,
        shapes=SHAPES,
        dtype="float32",
        target="sm_90a",
        strategy=strategy,
    )
    listed = await client.read_resource(f"experiment://{out['experiment_id']}")
    wall = 0.0
    for child in json.loads(listed.contents[0].text)["children"]:
        if child["tool"] == "microbench":
            row = json.loads(
                (await client.read_resource(f"experiment://{child['id']}")).contents[0].text
            )
            wall += row["duration_s"]
    return {"timing_s": out["timing_ms"] / 1e3, "wall_s": wall, "out": out}


def agree(race: dict, grid: dict) -> str:
    verdicts = []
    for r, g in zip(race["out"]["shapes"], grid["out"]["shapes"]):
        tied = [t["config"] for t in r["tied_with"]]
        same = r["winner"] == g["winner"] or g["winner"] in tied
        verdicts.append("same" if r["winner"] == g["winner"] else "tied" if same else "DIFFERENT")
    return "/".join(verdicts)


async def main(rounds: int) -> None:
    print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    runs: dict[str, list[dict]] = {"race": [], "grid": []}
    async with zoo_session("sweep-racing-") as client:
        for r in range(rounds):
            for strategy in ("race", "grid"):
                runs[strategy].append(await sweep(client, strategy))
                got = runs[strategy][-1]
                winners = [s["winner"] for s in got["out"]["shapes"]]
                print(
                    f"round {r + 1} {strategy}: timing {got['timing_s']:.1f} s, microbench wall "
                    f"{got['wall_s']:.1f} s, winners {winners}"
                )
            print(f"  winners race vs grid: {agree(runs['race'][-1], runs['grid'][-1])}")
    for what in ("timing_s", "wall_s"):
        race = statistics.median(x[what] for x in runs["race"])
        grid = statistics.median(x[what] for x in runs["grid"])
        print(f"{what}: race {race:.1f} s, grid {grid:.1f} s: grid / race {grid / race:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    anyio.run(main, parser.parse_args().rounds)
