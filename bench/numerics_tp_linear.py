"""The TF32 tensor-parallel case study: check_numerics on tp_linear's two implementations.

Runs the real tool (sandboxed jobs, fresh seeded inputs) on a throwaway copy of the
built-in zoo and prints, per shape, the three errors of partition equivalence and their
ratio to the float32 tolerance. Numbers go in kernels/tp_linear/README.md.

    python bench/numerics_tp_linear.py
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from infra_agent.kernels.workspace import EMBEDDED_ROOT, load_workspace
from infra_agent.sandbox import Sandbox
from infra_agent.tools import check_numerics

SHAPES = [{"M": 16, "N": 32, "K": 256}, {"M": 24, "N": 40, "K": 384}, {"M": 16, "N": 16, "K": 1024}]


class BenchContext:
    """The ToolContext the server would pass, minus the ledger and MCP."""

    def __init__(self, root: Path, sandbox: Sandbox):
        self.workspace = load_workspace(root)
        self.experiment_id = f"bench-{int(time.time())}"
        self.sandbox = sandbox

    async def progress(self, done, total=None, message=""):
        print(f"  [{done}/{total}] {message}", file=sys.stderr)

    def artifact(self, name, data):
        return f"artifact://{self.experiment_id}/{name}"

    def experiment(self, experiment_id):
        return None


async def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-numerics-"))
    root = tmp / "ws"
    shutil.copytree(EMBEDDED_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    sandbox = Sandbox(root, tmp / "state")
    ctx = BenchContext(root, sandbox)
    try:
        print(
            f"{'impl':7} {'shape':22} {'part vs ref':>11} {'unpart vs ref':>13} {'part vs unpart':>14} "
            f"{'ref err / tol':>13} verdict  check_s"
        )
        for impl in ("tf32", "tf32x3"):
            t0 = time.perf_counter()
            inp = check_numerics.Input(kernel="tp_linear", impl=impl, shapes=SHAPES, trials=3)
            out = await check_numerics.run(inp, ctx)
            seconds = time.perf_counter() - t0
            for case in out.cases:
                p = case.partition
                shape = " ".join(f"{k}={v}" for k, v in case.shape.items())
                print(
                    f"{impl:7} {shape:22} {p.partitioned_vs_reference_rel_l2:11.3g} "
                    f"{p.unpartitioned_vs_reference_rel_l2:13.3g} "
                    f"{p.partitioned_vs_unpartitioned_rel_l2:14.3g} "
                    f"{p.partitioned_vs_reference_rel_l2 / case.tolerance_rel_l2:13.3g} "
                    f"{case.verdict:8} {seconds / len(out.cases):.1f}"
                )
            print(f"  {impl}: {out.summary}")
    finally:
        await sandbox.aclose()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
