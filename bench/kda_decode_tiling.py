"""KDA decode, fused vs tiled along V: how the cost of vtiled's redundant row statistic grows with
the number of V tiles, measured by the tools themselves through MCP (replay 3's numbers, swept).

1. microbench A/B, fused (candidate) vs vtiled (baseline), interleaved in one job per shape, CPU
   under the Triton interpreter, B=1 H=1 K=4 and V = 32, 64, 128 (1, 2, 4 tiles of BLOCK_V=32).
   The ratio with its 95% CI; on CPU it counts interpreted tile steps, not GPU time.
2. compile_kernel sm_90a of both at B=1 H=32 K=128 and V = 64, 128, 256: static FFMA and MUFU per
   output element (count x threads_per_block / BLOCK_V) and vtiled / fused.

    python bench/kda_decode_tiling.py [--budget-ms 8000]
"""

from __future__ import annotations

import argparse

import anyio
from mcp_session import call, zoo_session

BENCH_V = (32, 64, 128)
COMPILE_V = (64, 128, 256)


def per_output(kernel: dict, field: str) -> float:
    return (
        kernel["instruction_mix"][field]
        * kernel["threads_per_block"]
        / kernel["constexprs"]["BLOCK_V"]
    )


async def bench_sweep(client, budget_ms: float) -> None:
    print("microbench fused vs vtiled (CPU, Triton interpreter), B=1 H=1 K=4")
    print("   V  tiles  fused ms  vtiled ms  fused/vtiled [95% CI]      verdict  n (fused, vtiled)")
    for v in BENCH_V:
        out = await call(
            client,
            "microbench",
            kernel="kda_decode",
            impl="fused",
            baseline="vtiled",
            shapes=[{"B": 1, "H": 1, "K": 4, "V": v}],
            budget_ms=budget_ms,
        )
        (s,) = out["shapes"]
        f, t = s["candidate"], s["baseline"]
        print(
            f"{v:4d}  {v // 32:5d}  {f['median_ms']:8.2f}  {t['median_ms']:9.2f}  {s['ratio']:.3f} "
            f"[{s['ci_low']:.3f}, {s['ci_high']:.3f}]  {s['verdict']:>11s}  ({f['n']}, {t['n']})"
        )


async def compile_sweep(client) -> None:
    print(
        "compile_kernel sm_90a, B=1 H=32 K=128: static counts per output element (fused -> vtiled)"
    )
    print("   V  regs (f, v)   FFMA/out          MUFU/out        FMUL/out")
    for v in COMPILE_V:
        shape = {"B": 1, "H": 32, "K": 128, "V": v}
        fused = await call(
            client,
            "compile_kernel",
            kernel="kda_decode",
            impl="fused",
            target="sm_90a",
            shape=shape,
        )
        tiled = await call(
            client,
            "compile_kernel",
            kernel="kda_decode",
            impl="vtiled",
            target="sm_90a",
            shape=shape,
            baseline=fused["experiment_id"],
        )
        (f,), (t,) = fused["kernels"], tiled["kernels"]
        cells = []
        for name in ("ffma", "mufu", "fmul"):
            a, b = per_output(f, name), per_output(t, name)
            cells.append(f"{a:5.0f} -> {b:5.0f} ({b / a:.1f}x)")
        print(
            f"{v:4d}  {f['registers_per_thread']:4d}, {t['registers_per_thread']:4d}   {'  '.join(cells)}"
            f"   spills {f['spill_stores_bytes']}, {t['spill_stores_bytes']} B"
        )


async def main(budget_ms: float) -> None:
    async with zoo_session("kda-tiling-") as client:
        await compile_sweep(client)
        await bench_sweep(client, budget_ms)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--budget-ms", type=float, default=8000.0, help="microbench budget per shape"
    )
    anyio.run(main, parser.parse_args().budget_ms)
