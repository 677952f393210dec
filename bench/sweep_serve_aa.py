"""How an A/A race ends on this host: two identical built-in engines, and what sweep_serve's race
can resolve between them.

1. The spread of the paired evidence, per candidate race round and metric: both engines up (the
   same config, two processes, as a race runs them), `--calls` serve_benchmark calls per round
   size with baseline_handle and `--pairs` repeats each (A B B A ...), the sizes (`--sizes`:
   requests per repeat, so a longer round) taking turns call by call so the host's drift hits
   them alike. Per pair i (repeat i of each side, back to back) the log ratio A/B of each
   metric: the client's request throughput (the race's goodput with no per-request SLO) and
   output tokens/s, and two the engine measures itself from its /metrics around each repeat,
   which the client's scheduling delays do not inflate: its mean time per request (queue +
   prefill + decode; at a fixed concurrency throughput goes as its inverse, Little's law) and
   its mean inter-token gap (both inverted, so above 1 is better as for throughput). Prints per
   candidate the sigma of the log ratios, the share of pairs outside +-5% / +-10%, and about
   how many pairs a tie in 9 of 10 A/A races would take at +-5% / +-10%.
2. What the race's rule makes of that spread, per candidate: per (pairs per round, rounds, tie
   margin), the share of simulated A/A races that end tie / decided / undecided, each race
   drawing its pairs from the measured log ratios (a bootstrap: resampled with replacement,
   centred on 0 since an A/A has no difference) and judged as tools/sweep_serve/race.py judges
   (its looks, its interval). The same rule with a planted 1.3x and 2x difference: the share
   decided, and where the slower config wins (must be 0).
3. `--sweeps N`: N real A/A sweeps (two configs that start identical engines, one ladder step),
   each with sweep_serve's default race: tie / decided / undecided counts, and each race's
   ratio [interval] and pairs.

    .venv/bin/python bench/sweep_serve_aa.py [--calls 4 --pairs 4 --sizes 12,48] [--sweeps 10]
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
DEFAULTS = Input.model_fields  # the race's defaults, as an agent gets them


def _metrics(repeat: dict) -> dict[str, float | None]:
    """Each candidate metric of one repeat, higher is better."""
    phases = repeat.get("phases_ms") or {}
    parts = [phases.get(f"{p}_ms") for p in ("queue", "prefill", "decode")]
    engine_request = sum(parts) if all(p is not None for p in parts) else None
    itl = phases.get("engine_itl_mean_ms")
    return {
        "request_throughput": repeat.get("request_throughput"),
        "output_throughput": repeat.get("output_throughput"),
        "engine_per_request": 1e3 / engine_request if engine_request else None,
        "engine_itl": 1e3 / itl if itl else None,
    }


METRICS = ("request_throughput", "output_throughput", "engine_per_request", "engine_itl")


async def spread(
    client, calls: int, pairs: int, sizes: list[int]
) -> tuple[dict[tuple[int, str], list[float]], dict[int, list[float]]]:
    """Per (requests per repeat, metric) the log ratios of every pair of `calls` alternating
    benchmarks of each size (the sizes taking turns), and per size each repeat's duration, s."""
    a = await call(client, "launch_serve", engine="builtin", args=BASE)
    b = await call(client, "launch_serve", engine="builtin", args=BASE)
    logs: dict[tuple[int, str], list[float]] = {(n, m): [] for n in sizes for m in METRICS}
    durations: dict[int, list[float]] = {n: [] for n in sizes}
    try:
        for i in range(calls):
            for n in sizes:
                out = await call(
                    client,
                    "serve_benchmark",
                    handle=a["handle"],
                    baseline_handle=b["handle"],
                    workload={
                        **WORKLOAD,
                        "num_requests": n,
                        "max_concurrency": LOAD,
                        "seed": 1000 + 10 * i + sizes.index(n),
                    },
                    repeats=pairs,
                )
                durations[n] += [r["duration_s"] for r in out["repeats"] + out["baseline_repeats"]]
                for x, y in zip(out["repeats"], out["baseline_repeats"]):
                    mx, my = _metrics(x), _metrics(y)
                    for m in METRICS:
                        if mx[m] and my[m]:
                            logs[(n, m)].append(math.log(mx[m] / my[m]))
                shown = ", ".join(f"{v:+.3f}" for v in logs[(n, "request_throughput")][-pairs:])
                print(
                    f"call {i + 1}, {n} requests a repeat: log ratios (request throughput) "
                    f"{shown}; load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    finally:
        for h in (a["handle"], b["handle"]):
            await call(client, "stop_serve", handle=h)
    return logs, durations


def pairs_for_tie(sigma: float, margin_pct: float, looks: int) -> int:
    """About how many pairs put an A/A's interval within +-margin in 9 of 10 races: the
    interval's half-width (the race's t quantile at its Bonferroni level, here as z) plus the
    mean's own 90th-percentile wander must fit ln(1 + margin)."""
    from scipy import stats

    z = stats.norm.ppf(1 - race_rule.FAMILY_ALPHA / looks / 2) + stats.norm.ppf(0.9)
    return math.ceil((z * sigma / math.log(1 + margin_pct / 100)) ** 2)


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
                    "repeat_requests": race.get("repeat_requests"),
                    "rounds": race.get("rounds"),
                }
            ),
            flush=True,
        )
    return counts


def _max_rounds() -> int:
    """The most rounds race_rounds takes (its le= bound)."""
    for bound in Input.model_fields["race_rounds"].metadata:
        if hasattr(bound, "le"):
            return int(bound.le)
    raise SystemExit("race_rounds has no upper bound")


async def main(args) -> None:
    print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}", flush=True)
    defaults = (
        race_rule.PAIRS_PER_ROUND,
        DEFAULTS["race_rounds"].default,
        DEFAULTS["tie_margin_pct"].default,
    )
    async with zoo_session("sweep-serve-aa-", tiny_checkpoint=True) as client:
        if args.calls:
            sizes = [int(x) for x in args.sizes.split(",")]
            logs, durations = await spread(client, args.calls, args.pairs, sizes)
            most = _max_rounds()
            looks = race_rule.looks(most)
            print(
                f"per candidate (requests a repeat, metric): sigma of the per-pair log ratio; "
                f"pairs for a tie in 9 of 10 at +-5% / +-10% (looks of a {most}-round race)"
            )
            for (n, m), xs in logs.items():
                if len(xs) < 3:
                    print(f"  {n} x {m}: {len(xs)} pairs, too few (no engine numbers?)")
                    continue
                sd = statistics.stdev(xs)
                out5 = sum(abs(x) > math.log(1.05) for x in xs) / len(xs)
                out10 = sum(abs(x) > math.log(1.10) for x in xs) / len(xs)
                print(
                    f"  {n} requests ({statistics.median(durations[n]):.2f} s a repeat) x {m}: "
                    f"{len(xs)} pairs, mean {statistics.fmean(xs):+.4f}, sigma {sd:.4f} "
                    f"({100 * (math.exp(sd) - 1):.1f}%); outside 5%: {out5:.0%}, outside 10%: "
                    f"{out10:.0%}; a 9/10 tie needs ~{pairs_for_tie(sd, 5, looks)} pairs at 5%, "
                    f"~{pairs_for_tie(sd, 10, looks)} at 10%"
                )
            print(
                "simulated races per candidate, 1000 A/A and 300 planted each: pairs x rounds, "
                "margin: A/A tie / decided / undecided; planted 1.3x decided; planted 2x decided, "
                "slower wins"
            )
            grid = sorted({defaults, (2, most, 5.0), (2, most, 10.0), (2, most, 20.0)})
            for (n, m), xs in logs.items():
                if len(xs) < 3:
                    continue
                for pairs, rounds, margin in grid:
                    aa = simulate(xs, pairs, rounds, margin, 0.0, 1000)
                    p13 = simulate(xs, pairs, rounds, margin, -math.log(1.3), 300)
                    p2 = simulate(xs, pairs, rounds, margin, -math.log(2), 300)
                    mark = " (the default)" if (pairs, rounds, margin) == defaults else ""
                    print(
                        f"  {n} x {m}, {pairs} x {rounds}, {margin:g}%{mark}: tie "
                        f"{aa['tie'] / 1000:.1%}, decided {aa['decided'] / 1000:.1%}, undecided "
                        f"{aa['undecided'] / 1000:.1%}; 1.3x decided "
                        f"{(p13['decided'] + p13['slower wins']) / 300:.0%} (slower wins "
                        f"{p13['slower wins']}); 2x decided "
                        f"{(p2['decided'] + p2['slower wins']) / 300:.0%} (slower wins "
                        f"{p2['slower wins']})",
                        flush=True,
                    )
        if args.sweeps:
            counts = await sweeps(client, args.sweeps)
            print(
                f"A/A sweeps with the default race ({defaults[0]} pairs x {defaults[1]} rounds, "
                f"{defaults[2]:g}%, {DEFAULTS['race_repeat_s'].default:g} s repeats): "
                + ", ".join(f"{k} {v} of {args.sweeps}" for k, v in counts.items())
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4, help="alternating benchmarks (0: none)")
    parser.add_argument("--pairs", type=int, default=4, help="pairs (repeats) per benchmark")
    parser.add_argument(
        "--sizes", default="12,48", help="requests per repeat to compare, comma-separated"
    )
    parser.add_argument("--sweeps", type=int, default=0, help="real A/A sweeps to run")
    anyio.run(main, parser.parse_args())
