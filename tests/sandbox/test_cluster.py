"""The Ray executor on a real two-node cluster on 127.0.0.1: placement by resources, the
workspace and inputs shipped, the out/ folder returned, the same answers as the local
sandbox, an impossible request refused, and a node killed mid-job."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from ray_cluster import SLOT, TYPE_A, TYPE_B, start_two_nodes
from sandbox_helpers import TEST_LIMITS, LoopThread, make_workspace

from infra_agent.sandbox import Job, Sandbox, SandboxError
from infra_agent.sandbox.cluster import NodeConfig, RayExecutor
from infra_agent.tools.common import provenance

# reads a workspace file, writes a file into out/, reads an input, says where it ran
SOURCE = """
import os, time
def main(seconds=0.0):
    time.sleep(seconds)
    hello = open("/workspace/kernels/hello.py").read()
    note = open("in/note.txt").read() if os.path.exists("in/note.txt") else None
    with open("out/answer.txt", "w") as f:  # the job runs in its own folder
        f.write(hello.upper())
    return {"hello": hello, "note": note}
"""


def probe_job(seconds: float = 0.0, **kwargs) -> Job:
    return Job(
        op="probe",
        payload={"source": SOURCE, "entry": "main", "args": [seconds]},
        timeout_s=60,
        **kwargs,
    )


JOB_FOLDERS: list[Path] = []  # where the nodes' sandboxes keep their job folders
BEFORE: set[str] = set()  # what listened before the cluster started


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    BEFORE.update(_listeners())
    nodes = start_two_nodes()
    ws = make_workspace(root)
    runner = LoopThread()
    local = Sandbox(ws, root / "state", limits=TEST_LIMITS)
    if not local.isolation.sandboxed:
        pytest.skip(f"no sandbox on this host: {local.isolation.missing.get('bwrap')}")
    config = NodeConfig(
        base_dir=str(root / "nodes"),
        session=uuid.uuid4().hex[:8],
        limits=TEST_LIMITS,
        device_facts=provenance.device_facts,
        fingerprint=provenance.fingerprint,
    )
    executor = RayExecutor(local, nodes.address, node=config)
    JOB_FOLDERS.append(Path(config.base_dir) / config.session)
    yield nodes, executor, runner, local, ws
    runner.call(executor.aclose())
    runner.call(local.aclose())
    runner.stop()
    nodes.shutdown()


def test_a_job_placed_by_resource_runs_on_the_node_that_has_it(cluster):
    nodes, executor, runner, _, ws = cluster
    for kind, node_id in ((TYPE_B, nodes.id_b), (TYPE_A, nodes.id_a)):
        res = runner.call(executor.run(probe_job(resources={kind: 0.001})))
        assert res.ok, (res.status, res.error, res.stderr_tail)
        assert res.placement is not None and res.placement.node_id == node_id
        assert res.placement.address == "127.0.0.1"
        assert res.placement.device_fingerprint == provenance.fingerprint(provenance.device_facts())
        # the workspace came from the server; out/ came back
        assert res.result["value"]["hello"] == (ws / "kernels/hello.py").read_text()
        assert (res.out_dir / "answer.txt").read_text() == (
            ws / "kernels/hello.py"
        ).read_text().upper()


def test_an_edit_reaches_the_nodes_and_inputs_travel_with_the_job(cluster, tmp_path):
    _, executor, runner, _, ws = cluster
    (ws / "kernels/hello.py").write_text("def hello():\n    return 'edited'\n")
    note = tmp_path / "note.txt"
    note.write_text("shipped")
    res = runner.call(executor.run(probe_job(resources={TYPE_B: 0.001}, inputs={"note.txt": note})))
    assert res.ok, (res.status, res.error, res.stderr_tail)
    assert "edited" in res.result["value"]["hello"]
    assert res.result["value"]["note"] == "shipped"


def test_jobs_spread_over_both_nodes_and_answer_as_the_local_sandbox_does(cluster):
    nodes, executor, runner, local, _ = cluster

    async def many():
        import asyncio

        return await asyncio.gather(*(executor.run(probe_job(0.5)) for _ in range(4)))

    results = runner.call(many())
    assert all(r.ok for r in results), [(r.status, r.error) for r in results]
    assert {r.placement.node_id for r in results} == {nodes.id_a, nodes.id_b}
    here = runner.call(local.run(probe_job()))
    assert here.placement is None
    assert {r.result["value"]["hello"] for r in results} == {here.result["value"]["hello"]}


# a progress line as a job's context writes it (worker/context.py), then a job still running
PROGRESS_SOURCE = """
import json, time
def main():
    with open("progress.jsonl", "a") as f:
        f.write(json.dumps({"t": time.time(), "done": 1, "total": 2, "message": "half way"}) + "\\n")
    time.sleep(3)
    return "done"
"""


def test_a_jobs_progress_comes_from_its_node_while_it_runs(cluster):
    """A long job on a node is not silent: its progress lines reach the caller as the job writes
    them (the call still running), as they do from the local sandbox."""
    import asyncio

    _, executor, runner, local, _ = cluster

    async def with_progress(where) -> tuple:
        lines: list[tuple] = []
        call: asyncio.Future | None = None

        async def progress(done, total, message) -> None:
            lines.append((done, total, message, call is not None and call.done()))

        job = Job(op="probe", payload={"source": PROGRESS_SOURCE, "entry": "main"}, timeout_s=60)
        call = asyncio.ensure_future(where.run(job, progress))
        return await call, lines

    on_node, node_lines = runner.call(with_progress(executor), timeout_s=120)
    assert on_node.ok and on_node.placement is not None, on_node.error
    assert (1, 2, "half way", False) in node_lines, node_lines  # before the call ended
    here, local_lines = runner.call(with_progress(local), timeout_s=120)
    assert here.ok and here.placement is None
    assert [x for x in node_lines if x[2] == "half way"] == [
        x for x in local_lines if x[2] == "half way"
    ]


def test_a_job_pinned_to_a_node_runs_there_or_is_refused(cluster):
    """Job.node: a device's ceilings are measured on the node whose job asked for them. Pinned
    jobs run on their node every time (unpinned ones spread over both); a node that is not alive,
    or one without the job's resources, is refused with the reason instead of left pending."""
    nodes, executor, runner, _, _ = cluster
    for node_id in (nodes.id_b, nodes.id_a):
        for _ in range(3):
            res = runner.call(executor.run(probe_job(node=node_id)))
            assert res.ok, (res.status, res.error, res.stderr_tail)
            assert res.placement is not None and res.placement.node_id == node_id
    with pytest.raises(SandboxError, match=r"must run on node 0123456789ab, which is not alive"):
        runner.call(executor.run(probe_job(node="0123456789ab" * 4 + "0" * 8)))
    with pytest.raises(SandboxError, match="no live node of the cluster has accelerator_type:H200"):
        runner.call(executor.run(probe_job(node=nodes.id_a, resources={TYPE_B: 0.001})))


def test_a_resource_no_node_has_is_refused_with_the_reason(cluster):
    _, executor, runner, _, _ = cluster
    with pytest.raises(SandboxError, match="no live node of the cluster has accelerator_type:B200"):
        runner.call(executor.run(probe_job(resources={"accelerator_type:B200": 1})))


def test_a_cancelled_call_kills_its_job_on_the_node(cluster):
    """Cancelling the awaiting call (the agent's cancel, a timeout) kills the job's processes on
    its node, not only Ray's bookkeeping; the node runs the next job normally."""
    import asyncio

    nodes, executor, runner, _, _ = cluster
    writes_pid = (
        "import os, time\n"
        "def main():\n"
        "    open('out/pid', 'w').write(str(os.getpid()))\n"  # its pid as seen in its namespace
        "    open('out/host_ns', 'w').write(os.readlink('/proc/self/ns/pid'))\n"
        "    time.sleep(60)\n"
    )
    job = Job(
        op="probe",
        payload={"source": writes_pid, "entry": "main"},
        timeout_s=120,
        resources={TYPE_B: 0.001},
    )

    async def cancel_after_start():
        task = asyncio.ensure_future(executor.run(job))
        for _ in range(200):
            await asyncio.sleep(0.1)
            if _running_probe_pids():
                break
        started = _running_probe_pids()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return started

    started = runner.call(cancel_after_start())
    assert started, "the job never started"
    deadline = time.monotonic() + 15
    while _running_probe_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running_probe_pids(), "the cancelled job still runs on its node"
    after = runner.call(executor.run(probe_job(resources={TYPE_B: 0.001})))
    assert after.ok and after.placement.node_id == nodes.id_b


def _running_probe_pids() -> list[int]:
    """Host pids of processes sleeping in the cancel test's job (its source is in their memory,
    not their command line: found by the job folder they run in)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd.startswith("/jobs/") and (proc / "root").exists():
            try:
                if (Path(f"/proc/{proc.name}/root") / cwd.lstrip("/") / "out/pid").exists():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def test_a_new_worker_removes_what_dead_workers_of_its_host_left(cluster):
    """A worker killed with its job (above: the cancel) leaves its folder (workspace copy, job
    folders); the next worker to start on the host removes it (and its session's folder, once
    empty), and no live worker's."""
    nodes, executor, runner, _, _ = cluster
    session = JOB_FOLDERS[-1]
    dead = session.parent / "old-session" / f"{platform.node()}-{nodes.id_b[:12]}-999999999"
    (dead / "ws").mkdir(parents=True)
    other_host = session.parent / "old-session" / f"elsewhere-{nodes.id_b[:12]}-999999999"
    other_host.mkdir(parents=True)
    gone = session.parent / "gone-session" / f"{platform.node()}-{nodes.id_b[:12]}-999999998"
    (gone / "state").mkdir(parents=True)
    live = sorted(
        p for p in session.iterdir() if Path(f"/proc/{p.name.rsplit('-', 1)[1]}").exists()
    )
    # a new worker: more jobs at once than the warm ones
    import asyncio

    async def burst():
        return await asyncio.gather(
            *(executor.run(probe_job(1.0, resources={SLOT: 0.25})) for _ in range(8))
        )

    assert all(r.ok for r in runner.call(burst()))
    assert not dead.exists() and other_host.exists()  # another host's folder is not ours to judge
    assert all(p.exists() for p in live)
    # a session whose last worker is gone leaves no folder; one that still holds one, stays
    assert not gone.parent.exists() and other_host.parent.exists()


def test_only_loopback_listens(cluster):
    """Every socket the two nodes, their workers and the driver listen on is on loopback."""
    opened = _listeners() - BEFORE
    assert opened, "the cluster listens on nothing?"
    outside = [a for a in opened if not a.startswith(("127.", "[::ffff:127.", "[::1]"))]
    assert not outside, sorted(opened)


def _listeners() -> set[str]:
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    return {line.split()[3] for line in out.splitlines() if len(line.split()) > 3}


def test_a_node_killed_mid_job_its_job_is_retried_and_a_job_pinned_to_it_fails(cluster, capfd):
    """Each node has one `slot`. A's is taken, so a job asking for a slot starts on B; B is
    killed while it runs: Ray starts it again on A once A's slot is free, and a job pinned to B
    fails with the reason instead of waiting forever. Last in the module: B does not come back."""
    nodes, executor, runner, _, _ = cluster
    import asyncio

    async def scenario():
        on_a = asyncio.ensure_future(
            executor.run(probe_job(5.0, resources={TYPE_A: 0.001, SLOT: 1}))
        )
        for _ in range(300):  # until A's slot is taken (a cold worker starts its sandbox first)
            await asyncio.sleep(0.1)
            if 5.0 in _started_on(nodes.id_a):
                break
        moved = asyncio.ensure_future(executor.run(probe_job(4.5, resources={SLOT: 1})))
        pinned = asyncio.ensure_future(executor.run(probe_job(4.0, resources={TYPE_B: 0.001})))
        for _ in range(300):  # until both run on B
            await asyncio.sleep(0.1)
            if {4.5, 4.0} <= _started_on(nodes.id_b):
                break
        on_b = _started_on(nodes.id_b)  # (a new worker removes dead workers' folders)
        await asyncio.to_thread(nodes.kill_b)
        try:
            await pinned
            pinned_error = None
        except SandboxError as exc:
            pinned_error = str(exc)
        return await on_a, await moved, pinned_error, on_b

    on_a, moved, pinned_error, on_b = runner.call(scenario(), timeout_s=180)
    assert on_a.ok and moved.ok, (moved.status, moved.error)
    assert moved.placement.node_id == nodes.id_a
    # it was started on both nodes: each node's sandbox keeps the folder of every job it ran
    assert 4.5 in on_b and 4.5 in _started_on(nodes.id_a)
    assert pinned_error is not None and "no live node" in pinned_error, pinned_error
    assert "accelerator_type:H200" in pinned_error
    # Ray's news of the dead node ("Raylet is terminated", "will be retried") went to stderr:
    # stdout is a stdio server's protocol, or a command's JSON
    out, err = capfd.readouterr()
    assert "raylet" not in out.lower(), out[-2000:]
    assert "will be retried" in err or "Raylet is terminated" in err, err[-2000:]


def _started_on(node_id: str) -> set[float]:
    """The sleep lengths of the probe jobs a node's sandboxes started (from their job folders)."""
    return {
        json.loads(spec.read_text())["payload"]["args"][0]
        for spec in JOB_FOLDERS[-1].glob(f"*-{node_id[:12]}-*/state/jobs/*/job.json")
        if json.loads(spec.read_text())["payload"].get("args")
    }


def test_two_workers_sweeping_at_once_each_finish(tmp_path, monkeypatch):
    """Workers that start together sweep the same dead folders: a session folder the other one
    removed while this one walked the base is skipped, not an error that fails the job."""
    from infra_agent.sandbox import node

    host = platform.node()
    for session in ("s1", "s2", "s3"):
        (tmp_path / session / f"{host}-abc-999999999" / "ws").mkdir(parents=True)
    real_rmtree = node.shutil.rmtree

    def rmtree_racing_the_other_worker(path, *args, **kwargs):
        real_rmtree(path, *args, **kwargs)
        for other in tmp_path.iterdir():  # the other worker emptied and removed the rest
            real_rmtree(other, ignore_errors=True)

    monkeypatch.setattr(node.shutil, "rmtree", rmtree_racing_the_other_worker)
    node._remove_dead_workers_folders(tmp_path)
    assert list(tmp_path.iterdir()) == []
