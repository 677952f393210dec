"""Racing vs timing every config: how much timing sweep_kernel's race spends to find the winner,
against the same sweep with strategy="grid" (every config timed once against the first, at the
race's last-round budget: the precision the race ends at), in one run.

The zoo's rmsnorm with its block size as a keyword parameter of the entry (so the entry derives
its one-block path from it, as a tuned impl would): BLOCK_N from 8 to 512 x num_warps 1 and 4 on
rows of 256. Blocks under 256 loop over the row (interpreted on CPU, each iteration costs), so
the space has clear losers, near-ties and exact ties (num_warps changes nothing on CPU). The two
strategies alternate (race, grid, race, grid, ...) on one server. Per sweep, from the ledger rows of
its microbench calls: the time spent in timed calls (each arm's timed calls x its median), the
calls' wall time (sandbox jobs, warm-up and all), and the timing budget the sweep allotted; and
whether the winners agree (a grid winner the race reports as tied with it counts).

    .venv/bin/python bench/sweep_racing.py [--rounds 2] [--block-n 256,8,16,32,64,128,512]

(`--block-n` narrows the space, the entry's own 256 first: a shorter run on a busy host.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import anyio
from mcp_session import call, zoo_session

ZOO = Path(__file__).resolve().parent.parent / "kernels" / "rmsnorm" / "rmsnorm_triton.py"
SOURCE = (
    ZOO.read_text()
    .replace("from reference import EPS", "EPS = 1e-6")
    .replace(
        "def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:",
        "def rmsnorm(x, weight, BLOCK_N=None):",
    )
    .replace(
        "    BLOCK_N = min(triton.next_power_of_2(N), MAX_FUSED_BYTES // x.element_size())\n",
        "    BLOCK_N = BLOCK_N or min(triton.next_power_of_2(N), MAX_FUSED_BYTES // x.element_size())\n",
    )
)
# The first config is what the entry picks itself at N=256 (BLOCK_N 256): the grid's reference and
# the race's first leader is the config one would have without a sweep (and the fastest here: the
# grid's best case, since every grid pair also times its reference).
SPACE = {"BLOCK_N": [256, 8, 16, 32, 64, 128, 512], "num_warps": [1, 4]}
SHAPES = [{"M": 4, "N": 256}]


async def sweep(client, strategy: str, space: dict) -> dict:
    started = time.perf_counter()
    out = await call(
        client,
        "sweep_kernel",
        kernel="rmsnorm",
        source=SOURCE,
        entry="rmsnorm",
        space=space,
        shapes=SHAPES,
        dtype="float32",
        target="sm_90a",
        strategy=strategy,
    )
    sweep_s = time.perf_counter() - started
    listed = await client.read_resource(f"experiment://{out['experiment_id']}")
    timed = wall = 0.0
    calls = 0
    for child in json.loads(listed.contents[0].text)["children"]:
        if child["tool"] != "microbench":
            continue
        row = json.loads(
            (await client.read_resource(f"experiment://{child['id']}")).contents[0].text
        )
        wall += row["duration_s"]
        calls += 1
        for shape in (row["result"] or {}).get("shapes") or []:
            for arm in (shape["candidate"], shape.get("baseline")):
                timed += arm["n"] * arm["median_ms"] / 1e3 if arm else 0.0
    return {
        "timed_s": timed,
        "wall_s": wall,
        "allotted_s": out["timing_ms"] / 1e3,
        "calls": calls,
        "sweep_s": sweep_s,
        "out": out,
    }


def agree(race: dict, grid: dict) -> str:
    verdicts = []
    for r, g in zip(race["out"]["shapes"], grid["out"]["shapes"]):
        tied = [t["config"] for t in r["tied_with"]]
        same = r["winner"] == g["winner"] or g["winner"] in tied
        verdicts.append("same" if r["winner"] == g["winner"] else "tied" if same else "DIFFERENT")
    return "/".join(verdicts)


async def main(rounds: int, block_n: list[int]) -> None:
    space = {**SPACE, "BLOCK_N": block_n}
    print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; space {space}")
    runs: dict[str, list[dict]] = {"race": [], "grid": []}
    async with zoo_session("sweep-racing-") as client:
        for r in range(rounds):
            for strategy in ("race", "grid"):
                runs[strategy].append(await sweep(client, strategy, space))
                got = runs[strategy][-1]
                winners = [s["winner"] for s in got["out"]["shapes"]]
                print(
                    f"round {r + 1} {strategy}: {got['calls']} microbench calls, timed "
                    f"{got['timed_s']:.1f} s, wall {got['wall_s']:.1f} s, allotted "
                    f"{got['allotted_s']:.1f} s; the whole sweep {got['sweep_s']:.0f} s, load "
                    f"{os.getloadavg()[0]:.1f}; winners {winners}"
                )
            print(f"  winners race vs grid: {agree(runs['race'][-1], runs['grid'][-1])}")
    for what in ("timed_s", "wall_s", "allotted_s", "sweep_s"):
        race = statistics.median(x[what] for x in runs["race"])
        grid = statistics.median(x[what] for x in runs["grid"])
        print(f"{what}: race {race:.1f} s, grid {grid:.1f} s: grid / race {grid / race:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--block-n",
        default=",".join(map(str, SPACE["BLOCK_N"])),
        help="BLOCK_N values, comma-separated, the entry's own choice (256) first",
    )
    args = parser.parse_args()
    anyio.run(main, args.rounds, [int(x) for x in args.block_n.split(",")])
