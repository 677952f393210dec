"""What sweep_serve's race costs: the same sweep (same space, ladder, workload) on the built-in
engine with race_rounds=0 (the ladders alone, the best config their pick, as sweep_serve chose
before the race) and with the default race (race_rounds and race_repeat_s as an agent gets
them), in one run, alternating (ladders, race, ladders, race, ...) on one server. Per sweep:
wall time (time.perf_counter around the call), its children by tool, and what it answered
(best, race outcome, ratio [interval], pairs, requests a repeat).
Prints each sweep and the ratio of the medians' wall times (race / ladders).

    .venv/bin/python bench/sweep_serve_race.py [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter

import anyio
from mcp_session import call, zoo_session

from infra_agent.tools.sweep_serve.schema import Input

ARGS = {
    "base_args": {"model": "tiny", "max_num_seqs": 4},
    "configs": [
        {"max_num_batched_tokens": 32},
        {"max_num_batched_tokens": 256},
        {"max_num_batched_tokens": 256, "extra_args": "--prefill-delay-ms 40"},
    ],
    "workload": {"num_requests": 16, "input_len": 32, "output_len": 8, "warmup": 1},
    "ladder": {"concurrencies": [1, 2, 4]},
    "slo": {"ttft_p99_ms": 2000},
    "repeats": 2,
}
RACE = Input.model_fields["race_rounds"].default  # the default race


async def one(client, race_rounds: int) -> dict:
    started = time.perf_counter()
    out = await call(client, "sweep_serve", **ARGS, race_rounds=race_rounds)
    wall_s = time.perf_counter() - started
    listed = await client.read_resource(f"experiment://{out['experiment_id']}")
    children = json.loads(listed.contents[0].text)["children"]
    race = out.get("race") or {}
    return {
        "race_rounds": race_rounds,
        "wall_s": round(wall_s, 1),
        "children": dict(Counter(c["tool"] for c in children)),
        "best": out["best"],
        "outcome": race.get("outcome", "no race"),
        "ratio": race.get("ratio"),
        "interval": race.get("interval"),
        "runner_up": race.get("runner_up"),
        "pairs": race.get("pairs"),
        "repeat_requests": race.get("repeat_requests"),
    }


async def main(rounds: int) -> None:
    rows: dict[int, list[dict]] = {0: [], RACE: []}
    async with zoo_session("sweep-serve-race-", tiny_checkpoint=True) as client:
        for i in range(rounds):
            for race_rounds in (0, RACE) if i % 2 == 0 else (RACE, 0):
                row = await one(client, race_rounds)
                rows[race_rounds].append(row)
                print(json.dumps(row), flush=True)
    ladders = statistics.median(r["wall_s"] for r in rows[0])
    raced = statistics.median(r["wall_s"] for r in rows[RACE])
    print(
        f"wall time, median of {rounds}: ladders alone {ladders:.1f} s, with the race "
        f"{raced:.1f} s: race / ladders = {raced / ladders:.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    anyio.run(main, parser.parse_args().rounds)
