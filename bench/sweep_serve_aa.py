"""How an A/A race ends on this host: two identical built-in engines, and what sweep_serve's race
can resolve between them.

1. The spread of the paired evidence: both engines up (the same config, two processes, as a
   race runs them), `--calls` serve_benchmark calls with baseline_handle and `--pairs` repeats
   each (A B B A ...); per pair i (repeat i of each side, back to back) the log ratio A/B of
   request throughput (the race's goodput with no per-request SLO) and of output tokens/s. Prints
   the mean and sigma of the log ratios, and the share of pairs outside +-5% / +-10%.
2. What the race's rule makes of that spread: per (pairs per round, rounds, tie margin), the
   share of simulated A/A races that end tie / decided / undecided, each race drawing its pairs
   from the measured log ratios (a bootstrap: resampled with replacement, centred on 0 since an
   A/A has no difference) and judged as tools/sweep_serve/race.py judges (its looks, its
   interval). The same rule with a planted 2x: the share where the slower config wins (must be 0).
3. `--sweeps N`: N real A/A sweeps (two configs that start identical engines, one ladder step),
   each with sweep_serve's default race: tie / decided / undecided counts, and each race's
   ratio [interval] and pairs.

    .venv/bin/python bench/sweep_serve_aa.py [--calls 4 --pairs 4] [--sweeps 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
from collections import Counter

import anyio
from mcp_session import call, zoo_session

from infra_agent.sandbox.worker.shared import ratio_decision
from infra_agent.tools.sweep_serve import race as race_rule
from infra_agent.tools.sweep_serve.schema import Input

BASE = {"model": "tiny", "max_num_seqs": 4}
WORKLOAD = {"num_requests": 12, "input_len": 32, "output_len": 8, "warmup": 1, "seed": 5}
LOAD = 4  # requests in flight
METRICS = ("request_throughput", "output_throughput")
DEFAULTS = Input.model_fields  # the race's defaults, as an agent gets them


async def spread(client, calls: int, pairs: int) -> dict[str, list[float]]:
    """Per metric, the log ratios of every pair of `calls` alternating benchmarks."""
    a = await call(client, "launch_serve", engine="builtin", args=BASE)
    b = await call(client, "launch_serve", engine="builtin", args=BASE)
    logs: dict[str, list[float]] = {m: [] for m in METRICS}
    try:
        for i in range(calls):
            out = await call(
                client,
                "serve_benchmark",
                handle=a["handle"],
                baseline_handle=b["handle"],
                workload={**WORKLOAD, "max_concurrency": LOAD, "seed": 1000 + i},
                repeats=pairs,
            )
            for m in METRICS:
                got = [
                    math.log(x[m] / y[m])
                    for x, y in zip(out["repeats"], out["baseline_repeats"])
                    if x[m] and y[m]
                ]
                logs[m] += got
            shown = ", ".join(f"{v:+.3f}" for v in logs["request_throughput"][-pairs:])
            print(f"call {i + 1}: log ratios (request throughput) {shown}", flush=True)
    finally:
        for h in (a["handle"], b["handle"]):
            await call(client, "stop_serve", handle=h)
    return logs


def simulate(
    logs: list[float], pairs: int, rounds: int, margin_pct: float, shift: float, n: int
) -> Counter:
    """Outcomes of `n` races drawing pairs from `logs` (centred, plus `shift`), by race.py's rule;
    "slower wins": a decided race whose winner is the config `shift` made slower."""
    centre = statistics.fmean(logs)
    pool = [x - centre for x in logs]
    rng = random.Random(7)
    out: Counter = Counter()
    for _ in range(n):
        ratios: list[float] = []
        outcome = "undecided"
        for r in range(1, rounds + 1):
            ratios += [math.exp(rng.choice(pool) + shift) for _ in range(pairs)]
            if r < race_rule.MIN_ROUNDS:
                continue
            low, high = race_rule.ratio_interval(ratios, race_rule.looks(rounds))
            decision = ratio_decision(low, high, margin_pct / 100)
            if decision is not None:
                outcome = decision
                break
        if outcome in ("slower", "faster"):
            # ratio_decision reads a time ratio: "slower" = the ratio above 1 (the leader wins);
            # with a planted slow leader (shift < 0), a ratio above 1 crowns the slow one
            outcome = "slower wins" if shift < 0 and outcome == "slower" else "decided"
        out[outcome] += 1
    return out


async def sweeps(client, n: int) -> Counter:
    counts: Counter = Counter()
    for i in range(n):
        started = time.perf_counter()
        out = await call(
            client,
            "sweep_serve",
            base_args=BASE,
            configs=[{"extra_args": ""}, {"extra_args": "--prefill-delay-ms 0"}],
            workload={**WORKLOAD, "seed": 100 + i},
            ladder={"concurrencies": [LOAD]},
            repeats=1,
        )
        race = out["race"] or {}
        counts[race.get("outcome", "no race")] += 1
        print(
            json.dumps(
                {
                    "sweep": i + 1,
                    "wall_s": round(time.perf_counter() - started, 1),
                    "load": round(os.getloadavg()[0], 2),
                    "outcome": race.get("outcome"),
                    "ratio": race.get("ratio"),
                    "interval": race.get("interval"),
                    "pairs": race.get("pairs"),
                    "rounds": race.get("rounds"),
                }
            ),
            flush=True,
        )
    return counts


async def main(args) -> None:
    print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}", flush=True)
    defaults = (
        race_rule.PAIRS_PER_ROUND,
        DEFAULTS["race_rounds"].default,
        DEFAULTS["tie_margin_pct"].default,
    )
    async with zoo_session("sweep-serve-aa-", tiny_checkpoint=True) as client:
        if args.calls:
            logs = await spread(client, args.calls, args.pairs)
            for m, xs in logs.items():
                sd = statistics.stdev(xs)
                out5 = sum(abs(x) > math.log(1.05) for x in xs) / len(xs)
                out10 = sum(abs(x) > math.log(1.10) for x in xs) / len(xs)
                print(
                    f"{m}: {len(xs)} pairs, mean log ratio {statistics.fmean(xs):+.4f}, "
                    f"sigma {sd:.4f} ({100 * (math.exp(sd) - 1):.1f}%); pairs outside 5%: "
                    f"{out5:.0%}, outside 10%: {out10:.0%}"
                )
            xs = logs["request_throughput"]
            print("simulated A/A races (request throughput), 2000 each: pairs x rounds, margin")
            grid = {defaults, (4, 4, 5.0), (4, 5, 5.0), (4, 4, 10.0), (5, 5, 10.0), (4, 6, 10.0)}
            for pairs, rounds, margin in sorted(grid):
                aa = simulate(xs, pairs, rounds, margin, 0.0, 2000)
                slow = simulate(xs, pairs, rounds, margin, -math.log(2), 500)
                mark = " (the default)" if (pairs, rounds, margin) == defaults else ""
                print(
                    f"  {pairs} x {rounds}, {margin:g}%{mark}: tie {aa['tie'] / 2000:.1%}, "
                    f"decided {aa['decided'] / 2000:.1%}, undecided {aa['undecided'] / 2000:.1%}; "
                    f"planted 2x: slower wins {slow['slower wins']} of 500, decided "
                    f"{slow['decided']} of 500"
                )
        if args.sweeps:
            counts = await sweeps(client, args.sweeps)
            print(
                f"A/A sweeps with the default race ({defaults[0]} pairs x {defaults[1]} rounds, "
                f"{defaults[2]:g}%): "
                + ", ".join(f"{k} {v} of {args.sweeps}" for k, v in counts.items())
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4, help="alternating benchmarks (0: none)")
    parser.add_argument("--pairs", type=int, default=4, help="pairs (repeats) per benchmark")
    parser.add_argument("--sweeps", type=int, default=0, help="real A/A sweeps to run")
    anyio.run(main, parser.parse_args())
