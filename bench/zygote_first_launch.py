"""CPU of a job's first Triton launch: a zygote that warmed Triton's launch path vs one that did not.

Every job is a child the zygote forks, and every job that launches a @triton.jit kernel
specialises its arguments once. The first specialisation in a process imports Triton's code
generator and Gluon's descriptor types (~50 modules); a zygote that did it before forking
(`zygote._warm_triton_launch`) leaves nothing for the child to import. A check_numerics call
forks about a dozen such children.

Both sides run the zygote's own `_warm_imports` in a fresh interpreter (the "cold" side with
`_warm_triton_launch` replaced by a no-op), then fork children that each load the zoo's
vector_add as a job does and launch it once under TRITON_INTERPRET=1; the CPU of each child
(user + system, from wait4) is its cost. The sides alternate, round by round, so a drift of
this shared host reaches both. Prints each side's median per child and the ratio.

    python bench/zygote_first_launch.py [--rounds 3] [--children 10]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

KERNEL = Path(__file__).resolve().parents[1] / "kernels" / "vector_add" / "vector_add_triton.py"


def one_side(warm: bool, children: int) -> list[float]:
    """In this process: the zygote's imports, then `children` forked jobs; their CPU seconds."""
    from infra_agent.sandbox.worker import zygote

    if not warm:
        zygote._warm_triton_launch = lambda: None
    zygote._warm_imports()
    cpu = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            import torch

            spec = importlib.util.spec_from_file_location("vector_add_triton", KERNEL)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            x = torch.rand(4096)
            module.vector_add(x, x)
            os._exit(0)
        _, status, usage = os.wait4(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        cpu.append(usage.ru_utime + usage.ru_stime)
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--children", type=int, default=10)
    args = ap.parse_args()
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    per_child: dict[str, list[float]] = {"cold": [], "warm": []}
    for _ in range(args.rounds):
        for side in ("cold", "warm"):
            out = subprocess.run(
                [sys.executable, __file__, "--side", side, "--children", str(args.children)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            per_child[side] += json.loads(out.stdout.splitlines()[-1])
    cold, warm = (statistics.median(per_child[s]) * 1e3 for s in ("cold", "warm"))
    n = args.rounds * args.children
    print(
        f"first Triton launch in a forked job, CPU per child (median of {n}, load {os.getloadavg()[0]:.1f}):"
    )
    print(f"  zygote without the launch warm-up: {cold:7.1f} ms")
    print(f"  zygote with it (as shipped):       {warm:7.1f} ms")
    print(f"  ratio: {cold / warm:.2f}x less CPU per job")


if __name__ == "__main__":
    if "--side" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--side", choices=("cold", "warm"))
        ap.add_argument("--children", type=int)
        a = ap.parse_args()
        print(json.dumps(one_side(a.side == "warm", a.children)))
    else:
        main()
