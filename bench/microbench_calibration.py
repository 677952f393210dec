"""Calibrate microbench's A/B verdicts on this machine, end to end (MCP client, sandbox).

(a) A/A: the same kernel as candidate and baseline. A verdict other than
    "inconclusive" is a false alarm; a 95% interval should give about 5%.
(b) A planted 10% slowdown: the same kernel plus a spin for a tenth of the call's own
    duration. It should be called "slower" nearly every time.

Repetitions of (a) and (b) alternate, so both see the same outside load. Prints both
rates, the median minimal detectable effect, and the median measured ratio of (b).

    python bench/microbench_calibration.py [--reps 60] [--budget-ms 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import anyio
from mcp_session import zoo_session

KERNEL, SHAPE = "rmsnorm", {"M": 64, "N": 1024}
# The reference's own arithmetic (kernels/rmsnorm/reference.py), plus the planted work.
SLOWER_BY_10PCT = """
import time
import torch

EPS = 1e-6


def rmsnorm(x, weight):
    t0 = time.perf_counter_ns()
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
    out = x * rstd * weight
    end = t0 + (time.perf_counter_ns() - t0) * 11 // 10  # extra work: a tenth of the call's time
    while time.perf_counter_ns() < end:
        pass
    return out
"""


async def main(reps: int, budget_ms: float) -> int:
    cases = {
        "A/A": dict(kernel=KERNEL, impl="reference", baseline="reference"),
        "planted +10%": dict(
            kernel=KERNEL, source=SLOWER_BY_10PCT, entry="rmsnorm", baseline="reference"
        ),
    }
    runs: dict[str, list[dict]] = {name: [] for name in cases}
    started = time.monotonic()
    async with zoo_session("mb-calib-") as client:
        for rep in range(reps):
            for name, args in cases.items():
                result = await client.call_tool(
                    "microbench", {**args, "shapes": [SHAPE], "budget_ms": budget_ms}
                )
                if result.is_error:
                    print(f"{name} rep {rep}: ERROR {result.content[0].text}", file=sys.stderr)
                    continue
                out = result.structured_content
                shape = out["shapes"][0]
                runs[name].append({**shape, "disturbances": out["disturbances"]})
                print(
                    f"{name:13s} rep {rep:2d}: {shape['verdict']:12s} ratio {shape['ratio']:.4f} "
                    f"[{shape['ci_low']:.4f}, {shape['ci_high']:.4f}] mde "
                    f"{shape['min_detectable_effect_pct']:.2f}% "
                    f"n={shape['candidate']['n']} stop={shape['stop_reason']} "
                    f"median={shape['candidate']['median_ms'] * 1e3:.1f}us",
                    file=sys.stderr,
                )

    aa, slow = runs["A/A"], runs["planted +10%"]
    false_rate = sum(r["verdict"] in ("faster", "slower") for r in aa) / max(len(aa), 1)
    detect_rate = sum(r["verdict"] == "slower" for r in slow) / max(len(slow), 1)
    print(
        f"microbench calibration: {KERNEL} reference {SHAPE}, float32, budget {budget_ms:g} ms per run, "
        f"{time.monotonic() - started:.0f} s in all"
    )
    for name, rows in runs.items():
        if not rows:
            continue
        verdicts = {
            v: sum(r["verdict"] == v for r in rows)
            for v in ("faster", "slower", "inconclusive", "invalid")
        }
        stops = {
            s: sum(r["stop_reason"] == s for r in rows) for s in {r["stop_reason"] for r in rows}
        }
        print(
            f"  {name:13s} {len(rows)} runs: verdicts {verdicts}; stop reasons {stops}; "
            f"median ratio {statistics.median(r['ratio'] for r in rows):.4f}; "
            f"median minimal detectable effect "
            f"{statistics.median(r['min_detectable_effect_pct'] for r in rows):.2f}%; "
            f"median n {statistics.median(r['candidate']['n'] for r in rows):.0f}"
        )
    print(
        f"  (a) A/A false faster/slower rate: {false_rate:.1%} (bar: <= 10%, nominal 5%) "
        f"{'PASS' if aa and false_rate <= 0.10 else 'FAIL'}"
    )
    print(
        f"  (b) planted 10% slowdown detected as slower: {detect_rate:.1%} (bar: >= 90%) "
        f"{'PASS' if slow and detect_rate >= 0.90 else 'FAIL'}"
    )
    if aa:
        print(f"  conditions at the end: {'; '.join(aa[-1]['disturbances'])}")
    return 0 if aa and slow and false_rate <= 0.10 and detect_rate >= 0.90 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--budget-ms", type=float, default=2000.0)
    ns = parser.parse_args()
    sys.exit(anyio.run(main, ns.reps, ns.budget_ms))
