"""GPU host check for the Triton cache shared among one call's jobs (needs CUDA; 2-4 minutes).

Without sharing, every sandbox job starts with an empty Triton cache, so each of
check_numerics' per-case jobs JIT-compiles the candidate again. This times check_numerics
on the zoo's rmsnorm (its GPU shapes x dtypes: 9 case jobs) through the MCP tool and the real
sandbox, side by side in one run:

- before: the same server with the jobs' cache group removed (what every job got until now);
- after, per-call group: a copy of the zoo (a user workspace): the call's jobs share one cache;
- after, trusted zoo: the built-in zoo, whose kernels persist in a trusted cache across calls
  (the second call should compile nothing).

Per call: wall time, `triton_compiles` (cache entries the jobs built), number of case jobs.

    python scripts/gpu_triton_cache_check.py [--reps 2] [--allow-unsandboxed]

Exit status 0 when sharing compiles fewer entries than the unshared run and the trusted
zoo's repeat call compiles none.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ARGS = {"kernel": "rmsnorm", "trials": 1, "checks": ["unwritten"]}


async def _calls(
    root: Path | None, reps: int, allow_unsandboxed: bool, share: bool
) -> list[tuple[float, int, int]]:
    from mcp import Client

    from infra_agent.sandbox.runner import Sandbox
    from infra_agent.server.app import build_server

    original = Sandbox.run

    async def run(self, job, progress=None):
        if not share:
            job.triton_cache = None  # the 'before': every job compiles for itself
        return await original(self, job, progress)

    Sandbox.run = run
    server = (
        build_server(root, allow_unsandboxed=allow_unsandboxed)
        if root
        else build_server(None, allow_unsandboxed=allow_unsandboxed)
    )
    rows = []
    try:
        async with Client(server) as client:
            for _ in range(reps):
                started = time.perf_counter()
                result = await client.call_tool("check_numerics", ARGS)
                if result.is_error:
                    raise SystemExit(f"check_numerics failed: {result.content}")
                out = result.structured_content
                rows.append(
                    (time.perf_counter() - started, out["triton_compiles"], len(out["cases"]))
                )
    finally:
        Sandbox.run = original
        await server.aclose()
    return rows


def _show(label: str, rows: list[tuple[float, int, int]]) -> None:
    walls = ", ".join(f"{w:.2f}" for w, _, _ in rows)
    print(
        f"{label:34} wall s [{walls}] (median {statistics.median(w for w, _, _ in rows):.2f}); "
        f"compiles {[c for _, c, _ in rows]}; case jobs {rows[0][2]}"
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--allow-unsandboxed", action="store_true")
    opts = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    from infra_agent.kernels.workspace import EMBEDDED_ROOT

    with tempfile.TemporaryDirectory(prefix="triton-cache-check-") as tmp:
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")  # a fresh trusted cache for the zoo
        copy = Path(tmp) / "ws"
        shutil.copytree(EMBEDDED_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
        before = await _calls(copy, opts.reps, opts.allow_unsandboxed, share=False)
        per_call = await _calls(copy, opts.reps, opts.allow_unsandboxed, share=True)
        trusted = await _calls(None, opts.reps, opts.allow_unsandboxed, share=True)
    _show("before (no sharing)", before)
    _show("after, one cache per call", per_call)
    _show("after, trusted zoo cache", trusted)
    ratio = statistics.median(w for w, _, _ in before) / statistics.median(
        w for w, _, _ in per_call
    )
    print(f"before / after (per call): {ratio:.2f}x wall")
    ok = per_call[0][1] < before[0][1] and trusted[-1][1] == 0
    print("OK" if ok else "FAIL: sharing did not reduce compiles, or the trusted zoo cache missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
