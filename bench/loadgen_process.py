"""Other calls during a large benchmark, and the client's own timings, with the load generator on
the server's loop (before) and in a process of its own (after; issue 36, item 1).

    .venv/bin/python bench/loadgen_process.py [--before REV] [--rounds 2] [--requests 2000]

Each side is an MCP session of its own (an in-process server on a fresh copy of the zoo, the
tiny checkpoint, the built-in engine), in a process of its own: on REV's code (`git archive`,
importable first on PYTHONPATH) and on this tree, alternating (before, after, before, ...) so
that a drifting shared host moves both alike. Per session:

1. a `list_kernels` poller (one call, then 50 ms, again) on the idle server: the control;
2. the same poller during `serve_benchmark` of --requests tiny requests (4 -> 2 tokens, all at
   once: 256 in flight), p50 and max of its latencies, and the longest the server's loop ran
   without waiting for events, in CPU time (a heartbeat task reads the thread's CPU clock every
   10 ms: the most CPU between two beats; a host that starves the process adds none of it);
3. `serve_benchmark` of 40 requests of 32 -> 32 tokens (ignore_eos), 4 in flight, 3 repeats:
   per repeat the client's TTFT p50 over the engine's own (its histogram's p50) and the client's
   TPOT mean over the engine's mean inter-token gap (its /metrics, scraped around the run).

Without --before, one session on this tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_latency import _extract  # noqa: E402  (git archive REV as an importable infra_agent)
from mcp_session import call, zoo_session  # noqa: E402

POLL_GAP_S = 0.05
TRUTH = {
    "num_requests": 40,
    "input_len": 32,
    "output_len": 32,
    "max_concurrency": 4,
    "warmup": 2,
    "ignore_eos": True,
}


async def poll(c, until: asyncio.Future | None, count: int = 0) -> list[float]:
    """list_kernels latencies, s: `count` polls, or until `until` is done."""
    out: list[float] = []
    while (until is not None and not until.done()) or (until is None and len(out) < count):
        t0 = time.perf_counter()
        await call(c, "list_kernels")
        out.append(time.perf_counter() - t0)
        await asyncio.sleep(POLL_GAP_S)
    return out


async def session(requests: int) -> dict:
    async with zoo_session("ia-lg-", tiny_checkpoint=True) as c:
        eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
        handle = eng["handle"]
        control = await poll(c, None, count=40)
        t0 = time.perf_counter()
        bench = asyncio.ensure_future(
            call(
                c,
                "serve_benchmark",
                handle=handle,
                workload={"num_requests": requests, "input_len": 4, "output_len": 2, "warmup": 0},
                repeats=1,
                time_budget_s=3000,
            )
        )
        bursts: list[float] = []  # this thread's CPU seconds between heartbeats on the loop

        async def heartbeat() -> None:
            last = time.thread_time()
            while not bench.done():
                await asyncio.sleep(0.01)
                now = time.thread_time()
                bursts.append(now - last)
                last = now

        beats = asyncio.ensure_future(heartbeat())
        during = await poll(c, bench)
        await beats
        big = await bench
        big_s = time.perf_counter() - t0
        truth = await call(c, "serve_benchmark", handle=handle, workload=TRUTH, repeats=3)
        ratios = []
        for r in truth["repeats"]:
            phases, lat = r["phases_ms"], r["latencies_ms"]
            ratios.append(
                {
                    "ttft": lat["ttft"]["median"] / phases["engine_ttft_p50_ms"],
                    "tpot": lat["tpot"]["mean"] / phases["engine_itl_mean_ms"],
                    "cpu_wait_ms": r.get("client_cpu_wait_ms"),
                }
            )
        await call(c, "stop_serve", handle=handle)
    return {
        "control_p50": statistics.median(control),
        "control_max": max(control),
        "during_p50": statistics.median(during),
        "during_max": max(during),
        "polls": len(during),
        "over_0_5": sum(d > 0.5 for d in during),
        "loop_burst_max": max(bursts),
        "big_s": big_s,
        "big_completed": big["metrics"]["completed"],
        "big_failed": big["metrics"]["failed"],
        "big_reconnected": big["metrics"].get("reconnected"),  # None before it was counted
        "big_duration_s": big["repeats"][0]["duration_s"],
        "truth": ratios,
    }


def show(side: str, got: dict) -> None:
    print(
        f"{side}: poller idle p50 {got['control_p50'] * 1e3:.0f} ms max "
        f"{got['control_max'] * 1e3:.0f} ms; during {got['big_completed']}+{got['big_failed']} "
        f"requests, {got.get('big_reconnected')} reconnected ({got['big_duration_s']:.1f} s run, "
        f"{got['big_s']:.0f} s call): "
        f"p50 {got['during_p50'] * 1e3:.0f} ms, max {got['during_max'] * 1e3:.0f} ms, "
        f"{got['over_0_5']} of {got['polls']} polls over 0.5 s; the loop's longest CPU burst "
        f"{got['loop_burst_max'] * 1e3:.0f} ms"
    )
    for i, t in enumerate(got["truth"], 1):
        print(
            f"  repeat {i}: client/engine TTFT p50 {t['ttft']:.2f}x, client TPOT mean / engine "
            f"ITL mean {t['tpot']:.2f}x, generator CPU wait {t['cpu_wait_ms']} ms"
        )


def before_and_after(rev: str, rounds: int, argv: list[str]) -> None:
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="ia-lg-before-") as tmp:
        sides = {f"before ({rev})": str(_extract(rev, Path(tmp))), "after (this tree)": None}
        for _ in range(rounds):
            for side, pythonpath in sides.items():
                env = dict(os.environ)
                if pythonpath is not None:  # found before the editable install of this tree
                    env["PYTHONPATH"] = pythonpath
                proc = subprocess.run(
                    [sys.executable, __file__, *argv], env=env, capture_output=True, text=True
                )
                found = re.search(r"^json: (.*)$", proc.stdout, re.M)
                if found is None:
                    raise SystemExit(
                        f"the {side} session printed no result:\n{proc.stderr[-3000:]}"
                    )
                got = json.loads(found.group(1))
                show(side, got)
                results.setdefault(side, []).append(got)
    (before, after) = results.values()

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    def truth(rows: list[dict], key: str) -> float:
        return statistics.median(t[key] for r in rows for t in r["truth"])

    print("\nmedians over rounds, before -> after (ratio after/before):")
    for key in ("control_max", "during_p50", "during_max", "loop_burst_max"):
        b, a = med(before, key), med(after, key)
        print(f"  poller {key}: {b * 1e3:.0f} -> {a * 1e3:.0f} ms ({a / b:.2f}x)")
    for key in ("ttft", "tpot"):
        b, a = truth(before, key), truth(after, key)
        print(f"  client/engine {key}: {b:.2f}x -> {a:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="git revision to compare with (one process each)")
    parser.add_argument("--rounds", type=int, default=2, help="sessions per side, alternating")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    if args.before:
        before_and_after(args.before, args.rounds, ["--requests", str(args.requests)])
        return
    got = asyncio.run(session(args.requests))
    print("json:", json.dumps(got))


if __name__ == "__main__":
    main()
