"""What the Ray executor adds per job, against the local sandbox, in one run side by side.

Both run the same no-op job (sandbox/worker/ops/noop.py) through a warm sandbox: locally the
server's own zygote; through Ray a task on a one-node cluster on 127.0.0.1 whose worker holds a
warm zygote of its own (sandbox/node.py), with the workspace manifest and the result's tar on
the way. Prints, for each: the median and p90 of one job at a time (a short pause between jobs,
as between an agent's calls), the added latency (Ray minus local, medians; the issue's goal:
under 5 ms), Ray's own round trip for a no-op streamed task in the same rhythm (the floor under
any executor on Ray), and jobs per second with 40 submitted at once (both with two job slots).

    python bench/fanout_overhead.py [--jobs N] [--burst N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from sandbox_overhead import quantiles  # p50 and p90, ms

from infra_agent.sandbox import Job, Sandbox
from infra_agent.sandbox.cluster import NodeConfig, RayExecutor
from infra_agent.tools.common import provenance

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


async def one_at_a_time(executor, num_jobs: int, pause_s: float) -> list[float]:
    samples = []
    for _ in range(num_jobs):
        await asyncio.sleep(pause_s)
        t0 = time.perf_counter()
        result = await executor.run(Job(op="noop"))
        samples.append(time.perf_counter() - t0)
        assert result.ok, (result.status, result.error)
    return samples


def _ray_nop():
    yield None


async def ray_floor(num_jobs: int, pause_s: float) -> list[float]:
    """Ray's own round trip for a task that does nothing, streamed as the executor's are: the
    floor under any executor on Ray, on this host, in the same rhythm."""
    import ray

    task = ray.remote(_ray_nop).options(num_returns="streaming", num_cpus=1)
    samples = []
    for _ in range(num_jobs):
        await asyncio.sleep(pause_s)
        t0 = time.perf_counter()
        async for ref in task.remote():
            await ref
        samples.append(time.perf_counter() - t0)
    return samples


async def burst(executor, num_jobs: int) -> float:
    t0 = time.perf_counter()
    results = await asyncio.gather(*(executor.run(Job(op="noop")) for _ in range(num_jobs)))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    return num_jobs / (time.perf_counter() - t0)


async def measure(num_jobs: int, burst_size: int, pause_s: float, ray_tmp: Path) -> dict:
    import ray

    ray.init(
        num_cpus=2,  # two job slots, as the local sandbox's "run" queue
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=str(ray_tmp / "ray"),
    )
    with tempfile.TemporaryDirectory(prefix="ia-fanout-") as state:
        local = Sandbox(KERNELS, Path(state) / "local")
        node = NodeConfig(
            base_dir=str(Path(state) / "nodes"),
            session=uuid.uuid4().hex[:8],
            limits=local.limits,
            device_facts=provenance.device_facts,
            fingerprint=provenance.fingerprint,
        )
        cluster = RayExecutor(local, "auto", node=node, resources={"run": {"CPU": 1.0}})
        try:
            for executor in (local, cluster):  # warm: zygotes started, Ray's workers forked
                await asyncio.gather(*(executor.run(Job(op="noop")) for _ in range(4)))
            out = {"isolation": local.isolation.level}
            for name, executor in (("local", local), ("ray", cluster)):
                out[name] = await one_at_a_time(executor, num_jobs, pause_s)
                out[f"{name}_jobs_per_s"] = await burst(executor, burst_size)
            out["ray_floor"] = await ray_floor(num_jobs, pause_s)
            return out
        finally:
            await local.aclose()
            ray.shutdown()


@contextlib.contextmanager
def ray_folder() -> Iterator[Path]:
    """A short folder of /tmp for Ray's sockets, logs and object store (AF_UNIX paths: 107 bytes),
    with Ray on loopback only, no token file in ~/.ray and no usage report (FACTS.md; read at
    import); removed on the way out, whatever happened. Ray's processes may still write there
    for a moment after ray.shutdown(), so removal is retried until the folder stays gone."""
    folder = Path(tempfile.mkdtemp(prefix="iaray-", dir="/tmp"))
    (folder / "ray").mkdir()
    os.environ.update(
        RAY_AUTH_MODE="disabled",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        RAY_TMPDIR=str(folder),
        RAY_USAGE_STATS_ENABLED="0",
    )
    try:
        yield folder
    finally:
        for _ in range(20):
            shutil.rmtree(folder, ignore_errors=True)
            time.sleep(0.25)
            if not folder.exists():
                break
        print(f"Ray's folder {folder}: {'left behind' if folder.exists() else 'removed'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60, help="one-at-a-time jobs per executor")
    parser.add_argument("--burst", type=int, default=40, help="jobs submitted at once")
    parser.add_argument("--pause", type=float, default=0.1, help="seconds between jobs")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with ray_folder() as ray_tmp:
        out = asyncio.run(measure(args.jobs, args.burst, args.pause, ray_tmp))
    (l50, l90), (r50, r90) = quantiles(out["local"]), quantiles(out["ray"])
    print(
        f"isolation: {out['isolation']}; {os.cpu_count()} cores; 1-min load average "
        f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}"
    )
    print(f"one no-op job at a time ({args.jobs} each, {args.pause:g} s apart), ms:")
    print(f"  local sandbox   p50 {l50:7.2f}  p90 {l90:7.2f}")
    print(f"  through Ray     p50 {r50:7.2f}  p90 {r90:7.2f}")
    f50, f90 = quantiles(out["ray_floor"])
    print(
        f"  added by Ray    {r50 - l50:+.2f} ms at the median (goal: < 5 ms); ratio {r50 / l50:.2f}x"
    )
    print(f"  Ray's own no-op streamed task: p50 {f50:7.2f}  p90 {f90:7.2f} (the floor under it)")
    print(f"  the executor's part beyond that floor: {r50 - l50 - f50:+.2f} ms")
    print(f"{args.burst} jobs at once, jobs/s:")
    print(
        f"  local {out['local_jobs_per_s']:.1f}, Ray {out['ray_jobs_per_s']:.1f}: "
        f"ratio Ray/local {out['ray_jobs_per_s'] / out['local_jobs_per_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
