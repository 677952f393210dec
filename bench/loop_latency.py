"""Where a warm check_numerics call on the zoo's rmsnorm spends its time, before and after a change.

    .venv/bin/python bench/loop_latency.py [--before REV] [--reps 5]

Two servers run side by side, one on the code of git revision REV (extracted with `git
archive`, default HEAD) and one on this working tree, each in its own process with its own
sandbox; their calls alternate (before, after, before, ...), so load on a shared machine hits
both alike. Each is warmed by one call first (zygote start, imports). Per call:

- total: the MCP call as the client sees it;
- jobs: wall time while at least one sandbox job ran (reference, then one per case), from
  `Sandbox.run`;
- op: time inside each job's op, from the job folder's own files (job.json is written just
  before the op starts, result.json when it ends); reference op apart from candidate ops;
- sandbox overhead: the jobs' summed wall time (not counting time queued for a slot) minus
  their op time (fork, confinement, cgroups, job folder, result hand-back);
- judge + server: total - jobs (plan, error metrics, findings, artifacts, ledger, MCP);
- late artifacts: how long plots drawn off the reply's path (server/late_artifacts.py) ran on
  after the reply; waited for, untimed, before the next call (0 for code without them).
When jobs overlap, the parts no longer add up to the total. Medians per side, then the spread
(min-max) of total and judge + server.

To compare with the code before a change: --before <its base commit>.

Scenarios: one tiny case (M=4 N=64 float32, 3 trials) and the default check (9 cases).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = {
    "one case": {"kernel": "rmsnorm", "shapes": [{"M": 4, "N": 64}], "dtypes": ["float32"]},
    "default (9 cases)": {"kernel": "rmsnorm"},
}
PACKAGES = ("server", "tools", "kernels", "serving", "sandbox")


# ---- parent: two servers, calls alternating -------------------------------------------------


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument(
        "--before", default="HEAD", help="git revision of the 'before' code (default HEAD)"
    )
    args.add_argument("--reps", type=int, default=5, help="calls per scenario and side")
    args.add_argument(
        "--scenario",
        choices=list(SCENARIOS),
        action="append",
        help="run only this scenario (repeatable; default all)",
    )
    args.add_argument("--serve", choices=("child",), help=argparse.SUPPRESS)
    opts = args.parse_args()
    if opts.serve:
        import anyio

        anyio.run(_child)
        return
    with tempfile.TemporaryDirectory(prefix="loop-latency-") as tmp:
        before_root = _extract(opts.before, Path(tmp))
        sides = {f"before ({opts.before})": _start(before_root), "after (this tree)": _start(None)}
        scenarios = opts.scenario or list(SCENARIOS)
        rows = {s: {name: [] for name in sides} for s in scenarios}
        for _ in range(opts.reps):
            for scenario in scenarios:
                for name, proc in sides.items():
                    rows[scenario][name].append(_ask(proc, scenario))
        for proc in sides.values():
            proc.stdin.close()
            proc.wait(timeout=60)
    _report(rows, list(sides))


def _extract(rev: str, tmp: Path) -> Path:
    """The code of `rev` as an importable `infra_agent` (its top-level folders as subpackages)."""
    archive = tmp / "before.tar"
    subprocess.run(
        ["git", "-C", str(REPO), "archive", "-o", str(archive), rev, *PACKAGES], check=True
    )
    root = tmp / "before" / "infra_agent"
    root.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root.parent


def _start(pythonpath: Path | None) -> subprocess.Popen:
    env = dict(os.environ)
    if pythonpath is not None:  # found before the editable install of this tree
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.Popen(
        [sys.executable, __file__, "--serve", "child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _ask(proc: subprocess.Popen, scenario: str) -> dict:
    proc.stdin.write(scenario + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"a bench server died (scenario {scenario!r}); see its stderr above")
    return json.loads(line)


def _report(rows: dict, sides: list[str]) -> None:
    parts = (
        "total_s",
        "jobs_s",
        "reference_op_s",
        "candidate_op_s",
        "sandbox_overhead_s",
        "judge_server_s",
        "late_artifacts_s",
    )
    print(f"median of {len(rows[next(iter(rows))][sides[0]])} warm calls per side, seconds")
    for scenario, by_side in rows.items():
        print(f"\n{scenario}")
        print(f"  {'':22}" + "".join(f"{p:>20}" for p in parts))
        medians = {}
        for side in sides:
            medians[side] = {p: statistics.median(r[p] for r in by_side[side]) for p in parts}
            print(f"  {side:22}" + "".join(f"{medians[side][p]:20.3f}" for p in parts))
        for side in sides:
            spread = "  ".join(
                f"{p} {min(r[p] for r in by_side[side]):.3f}-{max(r[p] for r in by_side[side]):.3f}"
                for p in ("total_s", "judge_server_s")
            )
            print(f"  {'spread ' + side:22}  {spread}")
        b, a = medians[sides[0]], medians[sides[1]]
        print(
            f"  {'before / after':22}"
            + "".join(f"{b[p] / a[p] if a[p] > 0 else float('inf'):19.2f}x" for p in parts)
        )
        print(
            f"  jobs per call: {by_side[sides[1]][-1]['num_jobs']}; hypothesis answer after: "
            f"{by_side[sides[1]][-1]['answer']}"
        )


# ---- child: one server on one code version ------------------------------------------------


async def _child() -> None:
    import anyio.to_thread
    from mcp import Client

    from infra_agent.kernels.workspace import EMBEDDED_ROOT
    from infra_agent.sandbox.runner import Sandbox
    from infra_agent.server.app import build_server

    jobs: list[dict] = []
    original_run = Sandbox.run

    async def timed_run(self, job, progress=None):
        started = time.perf_counter()
        res = await original_run(self, job, progress)
        jobs.append(
            {
                "op": job.op,
                "start": started + res.queued_s,
                "end": time.perf_counter(),
                "op_s": _op_seconds(res.out_dir),
            }
        )
        return res

    Sandbox.run = timed_run  # measures the real sandbox from outside; nothing else changes
    with tempfile.TemporaryDirectory(prefix="loop-latency-ws-") as tmp:
        root = Path(tmp) / "ws"
        shutil.copytree(EMBEDDED_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
        server = build_server(root)
        async with Client(server) as client:
            await client.call_tool("check_numerics", SCENARIOS["one case"])  # warm: zygote, imports
            for line in sys.stdin:
                jobs.clear()
                started = time.perf_counter()
                result = await client.call_tool("check_numerics", SCENARIOS[line.strip()])
                total = time.perf_counter() - started
                if result.is_error:
                    raise SystemExit(f"check_numerics failed: {result.content}")
                row = _breakdown(total, jobs, result.structured_content)
                # Plots drawn off the reply's path (server/late_artifacts.py; absent in older code):
                # finished before the next call, untimed, so neither side's calls share the CPU
                # with them; their time after the reply is reported apart.
                late = getattr(server.state, "late_artifacts", None)
                started = time.perf_counter()
                if late is not None:
                    await anyio.to_thread.run_sync(late.wait_all)
                row["late_artifacts_s"] = time.perf_counter() - started if late is not None else 0.0
                print(json.dumps(row), flush=True)
        await server.aclose()


def _op_seconds(out_dir: Path | None) -> float:
    job_dir = Path(out_dir).parent if out_dir else None
    if job_dir is None:
        return 0.0
    ended = [
        p.stat().st_mtime for p in (job_dir / "result.json", job_dir / "error.json") if p.exists()
    ]
    return max(ended) - (job_dir / "job.json").stat().st_mtime if ended else 0.0


def _breakdown(total: float, jobs: list[dict], out: dict) -> dict:
    jobs_s, covered_to = 0.0, 0.0  # wall time with at least one job running (jobs may overlap)
    for j in sorted(jobs, key=lambda j: j["start"]):
        jobs_s += max(0.0, j["end"] - max(j["start"], covered_to))
        covered_to = max(covered_to, j["end"])
    walls = sum(j["end"] - j["start"] for j in jobs)
    reference_op = sum(j["op_s"] for j in jobs if j["op"] == "reference")
    candidate_op = sum(j["op_s"] for j in jobs if j["op"] != "reference")
    answer = (out.get("hypothesis_answer") or {}).get("answer", "n/a")
    return {
        "total_s": total,
        "jobs_s": jobs_s,
        "reference_op_s": reference_op,
        "candidate_op_s": candidate_op,
        "sandbox_overhead_s": walls - reference_op - candidate_op,
        "judge_server_s": total - jobs_s,
        "num_jobs": len(jobs),
        "verdict": out["verdict"],
        "answer": answer,
    }


if __name__ == "__main__":
    main()
