"""GPU host check for microbench (needs CUDA; about 3-4 minutes on an H100/H200).

1. Same buffers, two timers: a large device copy timed by microbench's own worker loop
   (CUDA events, L2 flush, whole-device sync before the end event, adaptive stop) and
   by triton.testing.do_bench (median). The two GB/s must agree within 5%.
2. The built-in kernels (vector_add, rmsnorm; Triton) at their GPU shapes against their
   torch references, through the MCP tool and the sandbox: median, GB/s, % of peak,
   bound class, verdict.
3. A/A on the GPU: the same Triton kernel as candidate and baseline, repeatedly; the
   rate of false faster/slower verdicts (nominal 5%).

    python scripts/gpu_microbench_check.py [--copy-gib 2] [--aa-reps 20] [--allow-unsandboxed]

Exit status 0 when the copy agrees within 5% and the A/A false rate is <= 10%.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio


def same_buffer_copy(copy_gib: float) -> tuple[float, float]:
    """GB/s of out.copy_(x) by microbench's worker loop and by do_bench, same tensors."""
    import torch
    import triton.testing

    from infra_agent.sandbox.worker import timing
    from infra_agent.sandbox.worker.context import JobContext
    from infra_agent.sandbox.worker.ops import microbench as op

    x = torch.randn(int(copy_gib * 2**30) // 4, device="cuda")
    out = torch.empty_like(x)
    moved = 2 * x.numel() * x.element_size()  # read x, write out

    job = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    for sub in ("in", "out"):
        (job / sub).mkdir()
    ctx = JobContext(
        job_dir=job, in_dir=job / "in", out_dir=job / "out", workspace=None, device="cuda"
    )
    timer = timing.CudaTimer(torch, None)
    arms = [timing.Arm("candidate", lambda t: out.copy_(t), num_spot_checks=0)]
    sets = [(x,)]
    start = time.perf_counter_ns()
    budget_ns = 3e9
    op._warm_up(arms, sets, timer, start + op.WARMUP_MAX_FRACTION * budget_ns)
    stop = op._measure(
        arms, sets, timer, random.Random(0), {"target_rel_se": 0.002}, start + budget_ns, ctx
    )
    ours_ms = statistics.median(arms[0].samples) / 1e6
    theirs_ms = triton.testing.do_bench(
        lambda: out.copy_(x), warmup=100, rep=1000, return_mode="median"
    )
    shutil.rmtree(job, ignore_errors=True)
    ours, theirs = moved / ours_ms / 1e6, moved / theirs_ms / 1e6
    print(
        f"[1] copy of {copy_gib:g} GiB: microbench loop {ours:.0f} GB/s (median {ours_ms:.4f} ms, "
        f"n={len(arms[0].samples)}, stop={stop}); do_bench {theirs:.0f} GB/s (median {theirs_ms:.4f} ms); "
        f"ratio {ours / theirs:.4f}"
    )
    return ours, theirs


async def through_the_tool(aa_reps: int, allow_unsandboxed: bool) -> float:
    from mcp import Client

    from infra_agent.kernels.workspace import EMBEDDED_ROOT
    from infra_agent.server.app import build_server

    root = Path(tempfile.mkdtemp(prefix="gpu-check-ws-")) / "ws"
    shutil.copytree(EMBEDDED_ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    server = build_server(root, allow_unsandboxed=allow_unsandboxed)

    async def call(client, **args) -> dict:
        result = await client.call_tool("microbench", args)
        if result.is_error:
            raise RuntimeError(result.content[0].text)
        return result.structured_content

    try:
        async with Client(server) as client:
            for kernel in ("vector_add", "rmsnorm"):
                out = await call(
                    client, kernel=kernel, impl="triton", baseline="reference", budget_ms=500
                )
                if kernel == "vector_add":
                    c = out["ceilings"]
                    print(
                        f"[2] device {out['device'].get('name')}; ceilings ({c.get('source')}): copy "
                        f"{c.get('copy_gbps', 0):.0f} GB/s, matmul {c.get('matmul_tflops')} TFLOP/s; clocks "
                        f"{out['clocks']}"
                    )
                for s in out["shapes"]:
                    cand = s["candidate"]
                    print(
                        f"[2] {kernel:10s} {s['shape']}: triton median {cand['median_ms']:.4f} ms, "
                        f"{cand['achieved_gbps'] or 0:.0f} GB/s ({cand['pct_of_peak_bandwidth'] or 0:.0f}% of copy), "
                        f"{cand['bound']}, spot-check {cand['spot_check']}, impossible={cand['is_impossible']}; "
                        f"vs reference ratio {s['ratio']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}] {s['verdict']}"
                    )
            verdicts = []
            for _ in range(aa_reps):
                out = await call(
                    client,
                    kernel="vector_add",
                    impl="triton",
                    baseline="triton",
                    shapes=[{"N": 1 << 24}],
                    budget_ms=300,
                )
                s = out["shapes"][0]
                verdicts.append((s["verdict"], s["ratio"], s["min_detectable_effect_pct"]))
            false = sum(v in ("faster", "slower") for v, _, _ in verdicts) / max(len(verdicts), 1)
            print(
                f"[3] A/A vector_add triton N=2^24, {len(verdicts)} runs: false faster/slower rate {false:.1%}; "
                f"median ratio {statistics.median(r for _, r, _ in verdicts):.4f}; median minimal detectable "
                f"effect {statistics.median(m for _, _, m in verdicts):.2f}%"
            )
            return false
    finally:
        await server.aclose()
        shutil.rmtree(root.parent, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--copy-gib", type=float, default=2.0)
    parser.add_argument("--aa-reps", type=int, default=20)
    parser.add_argument(
        "--allow-unsandboxed",
        action="store_true",
        help="run the tool part without bwrap isolation (a trusted GPU host only)",
    )
    ns = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU host", file=sys.stderr)
        return 2
    started = time.monotonic()
    ours, theirs = same_buffer_copy(ns.copy_gib)
    copy_ok = abs(ours / theirs - 1) <= 0.05
    false_rate = anyio.run(through_the_tool, ns.aa_reps, ns.allow_unsandboxed)
    aa_ok = false_rate <= 0.10
    print(
        f"copy agreement within 5%: {'PASS' if copy_ok else 'FAIL'}; A/A false rate <= 10%: "
        f"{'PASS' if aa_ok else 'FAIL'}; {time.monotonic() - started:.0f} s"
    )
    return 0 if copy_ok and aa_ok else 1


if __name__ == "__main__":
    sys.exit(main())
