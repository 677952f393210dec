"""How often does `ttft_p50 <= 1.05 * baseline.ttft_p50` flip in A/A, and how often does it
catch a planted prefill regression? Side by side in one run, through the MCP tools an
agent calls, on the built-in engine with a tiny checkpoint built here.

Two ways to give the baseline, both measured here:
- experiment: one baseline serve_benchmark on the normal engine first; then N A/A runs on
  that same engine and N runs on an engine started with --prefill-delay-ms, alternating,
  each judged against that earlier experiment;
- alternating: N A/A runs with baseline_handle= the same engine and N planted runs with
  baseline_handle= the normal engine (the baseline measured in the same call, its repeats
  alternating with the candidate's).
Prints the answer counts of each and the rates: a false "contradicted" in A/A is a flip
(goal: under 5%); "inconclusive" means the repeats straddled the threshold.

    python bench/serve_criteria_flips.py [--runs 10] [--delay-ms 40] [--requests 64]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os

from mcp_session import call, zoo_session

CRITERION = "ttft_p50 <= 1.05 * baseline.ttft_p50"


async def main(runs: int, delay_ms: int, requests: int, repeats: int) -> None:
    workload = {"num_requests": requests, "input_len": 24, "output_len": 8, "rate": 32.0, "seed": 3}
    async with zoo_session("ia-flips-", tiny_checkpoint=True) as c:
        normal = (await call(c, "launch_serve", engine="builtin", args={"model": "tiny"}))["handle"]
        slow = (
            await call(
                c,
                "launch_serve",
                engine="builtin",
                args={"model": "tiny", "extra_args": ["--prefill-delay-ms", str(delay_ms)]},
            )
        )["handle"]
        base = await call(c, "serve_benchmark", handle=normal, workload=workload, repeats=repeats)
        planted = f"+{delay_ms} ms prefill"
        answers = {
            (mode, label): collections.Counter()
            for mode in ("experiment", "alternating")
            for label in ("A/A", planted)
        }
        ratios = {k: [] for k in answers}
        for _ in range(runs):
            for (mode, label), counts in answers.items():
                handle = normal if label == "A/A" else slow
                against = (
                    {"baseline": base["experiment_id"]}
                    if mode == "experiment"
                    else {"baseline_handle": normal}
                )
                out = await call(
                    c,
                    "serve_benchmark",
                    handle=handle,
                    workload=workload,
                    repeats=repeats,
                    criteria=[CRITERION],
                    **against,
                )
                counts[out["criteria"]["answer"]] += 1
                ratios[(mode, label)].append(
                    out["metrics"]["ttft_p50"] / out["baseline_metrics"]["ttft_p50"]
                )
    print(
        f"load average {os.getloadavg()[0]:.2f}; {runs} runs each, {repeats} repeats of {requests} requests per "
        f"run; criterion {CRITERION!r}"
    )
    for (mode, label), counts in answers.items():
        r = sorted(ratios[(mode, label)])
        print(
            f"  {mode:>11} {label:>15}: "
            + ", ".join(
                f"{k} {counts[k]}/{runs}" for k in ("supported", "inconclusive", "contradicted")
            )
            + f"; TTFT p50 ratio median {r[len(r) // 2]:.3f} (min {r[0]:.3f}, max {r[-1]:.3f})"
        )
    for mode in ("experiment", "alternating"):
        flips = answers[(mode, "A/A")]["contradicted"] / runs
        caught = answers[(mode, planted)]["contradicted"] / runs
        print(
            f"{mode}: A/A flip rate {100 * flips:.1f}% (goal < 5%); planted regression caught {100 * caught:.1f}%"
        )


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--delay-ms", type=int, default=40)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    asyncio.run(main(a.runs, a.delay_ms, a.requests, a.repeats))
