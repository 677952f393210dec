"""Tool calls on a two-node Ray cluster on 127.0.0.1 (tests/ray_cluster.py), through the MCP
client: a sweep's trials run on both nodes and land in one ledger with each node's fingerprint,
its answer is the one the local sandbox gives, device_info lists the cluster, and a sweep whose
node B is killed mid-sweep still completes with every ledger row closed.

The second source for every claim is the ledger itself, read with sqlite3: the `nodes` of each
trial's row (what the executor's placements said) and its status."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ToolCallError, call, copy_zoo
from ray_cluster import SLOT, TYPE_A, TYPE_B, start_two_nodes
from stdio_server import StdioServer

from infra_agent.sandbox import ServiceSpec

pytestmark = pytest.mark.anyio

SWEEP = {
    "kernel": "rmsnorm",
    "space": {"num_warps": [1, 2, 4]},
    "shapes": [{"M": 4, "N": 64}],
    "dtype": "float32",
    "target": "sm_90a",
    "round_ms": 100,
}


@pytest.fixture(scope="module")
def two_nodes():
    nodes = start_two_nodes()
    yield nodes
    nodes.shutdown()


def _workspace(parent: Path, address: str | None) -> Path:
    ws = copy_zoo(parent)
    if address:  # the workspace's [cluster] table, as a user would write it
        with open(ws / "infra-agent.toml", "a") as f:
            f.write(f'\n[cluster]\naddress = "{address}"\nnode_dir = "{parent / "nodes"}"\n')
    return ws


def _children(ws: Path, parent_id: str) -> list[dict]:
    with sqlite3.connect(ws / ".infra-agent" / "ledger.sqlite") as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT tool, status, nodes, error, started_at FROM experiments WHERE parent_id=? "
            "ORDER BY seq",
            (parent_id,),
        ).fetchall()
    return [{**dict(r), "nodes": json.loads(r["nodes"] or "[]")} for r in rows]


async def _sweep(ws: Path, during=None, lost: dict | None = None) -> dict:
    """The sweep's answer, then device_info's and list_serves'; with `lost` (an engine whose node
    `during` kills), list_serves once it reports that engine dead, or after 120 s: the actor's
    worker on the killed node can still answer for a moment (beside two CPU hogs it did)."""
    from mcp import Client

    from infra_agent.server.app import build_server

    srv = build_server(ws)
    try:
        async with Client(srv) as client:
            sweep = asyncio.ensure_future(call(client, "sweep_kernel", **SWEEP))
            if during is not None:
                await during(client)
            out = await sweep
            info = await call(client, "device_info")
            serves = await call(client, "list_serves")
            for _ in range(240 if lost is not None else 0):
                if not any(s["alive"] for s in serves["serves"] if s["handle"] == lost["handle"]):
                    break
                await asyncio.sleep(0.5)
                serves = await call(client, "list_serves")
    finally:
        await srv.aclose()
    return {"sweep": out, "device_info": info, "serves": serves}


async def test_a_sweep_runs_on_both_nodes_and_answers_as_the_local_sandbox(two_nodes, tmp_path):
    ws = _workspace(tmp_path / "cluster", two_nodes.address)
    on_cluster = await _sweep(ws)
    out = on_cluster["sweep"]
    trials = _children(ws, out["experiment_id"])
    # a race round too short for microbench is an error row the sweep reads as such
    assert trials and all(
        t["status"] == "ok" or (t["tool"] == "microbench" and "budget_ms" in t["error"])
        for t in trials
    ), [(t["tool"], t["error"]) for t in trials if t["status"] != "ok"]
    ran_on = {n["node_id"] for t in trials for n in t["nodes"]}
    assert ran_on == {two_nodes.id_a, two_nodes.id_b}, trials
    assert all(n["device_fingerprint"] and n["jobs"] >= 1 for t in trials for n in t["nodes"])

    nodes = {n["node_id"]: n for n in on_cluster["device_info"]["cluster"]}
    assert nodes[two_nodes.id_a]["resources"][TYPE_A] == 1
    assert nodes[two_nodes.id_b]["resources"][TYPE_B] == 1
    assert "cluster: 2 of 2 nodes alive" in on_cluster["device_info"]["summary"]

    local = (await _sweep(_workspace(tmp_path / "local", None)))["sweep"]
    for field in ("tried", "compiled", "passed_numerics", "complete"):
        assert out[field] == local[field], field
    assert {json.dumps(c["config"], sort_keys=True): c["stage"] for c in out["configs"]} == {
        json.dumps(c["config"], sort_keys=True): c["stage"] for c in local["configs"]
    }


NUMERICS = {
    "kernel": "rmsnorm",
    "shapes": [{"M": 3, "N": 40}, {"M": 2, "N": 64}],
    "dtypes": ["float32", "float16"],
    "trials": 2,
}


async def _check_numerics(ws: Path) -> dict:
    from mcp import Client

    from infra_agent.server.app import build_server

    srv = build_server(ws)
    try:
        async with Client(srv) as client:
            return await call(client, "check_numerics", **NUMERICS)
    finally:
        await srv.aclose()


def _comparable(case: dict) -> dict:
    """What a case answered that does not hang on its seeds (each call draws fresh ones)."""
    return {
        "case": case["case"],
        "verdict": case["verdict"],
        "aten_ops": case["aten_ops"],
        "triton_launches": case["triton_launches"],
        "mismatches": case["errors"]["num_mismatches"],
        "partition_ok": case["partition"]["is_within_tolerance"],
    }


async def test_check_numerics_cases_fan_out_over_both_nodes_with_the_local_answer(
    two_nodes, tmp_path
):
    """One call's cases are independent jobs: on a cluster they run on both nodes at once, and
    each case answers as on the local sandbox (verdict, the ops and launches the kernel made)."""
    ws = _workspace(tmp_path / "cluster", two_nodes.address)
    with open(ws / "infra-agent.toml", "a") as f:  # a run job holds a node (as a GPU would)
        f.write(f"\n[cluster.resources.run]\n{SLOT} = 1\n")
    out = await _check_numerics(ws)
    with sqlite3.connect(ws / ".infra-agent" / "ledger.sqlite") as db:
        (nodes,) = db.execute(
            "SELECT nodes FROM experiments WHERE id=?", (out["experiment_id"],)
        ).fetchone()
    jobs = {n["node_id"]: n["jobs"] for n in json.loads(nodes)}
    assert set(jobs) == {two_nodes.id_a, two_nodes.id_b}, jobs
    assert sum(jobs.values()) == 1 + len(out["cases"]), jobs  # the reference, then a job a case

    local = await _check_numerics(_workspace(tmp_path / "local", None))
    assert out["verdict"] == local["verdict"] == "pass", out["summary"]
    assert [_comparable(c) for c in out["cases"]] == [_comparable(c) for c in local["cases"]]


def test_the_stdio_server_on_a_cluster_writes_only_protocol_to_stdout(two_nodes, tmp_path):
    """An IDE's server (stdio): joining Ray and running a job on a node print nothing to stdout
    but JSON-RPC (every line is parsed as such; a stray line would end the reader)."""
    ws = _workspace(tmp_path, two_nodes.address)
    server = StdioServer(ws)
    try:
        server.initialize()
        server.call(1, "compile_kernel", {"kernel": "rmsnorm", "target": "sm_90a"})
        reply = server.reply(1, timeout_s=300)
        assert not reply["result"].get("isError"), reply
        assert reply["result"]["structuredContent"]["kernels"], reply
        server.call(2, "list_experiments", {})
        rows = server.reply(2)["result"]["structuredContent"]
        assert server.lines.empty() and server.proc.poll() is None
    finally:
        server.proc.kill()
        server.proc.wait()
    assert rows
    with sqlite3.connect(ws / ".infra-agent" / "ledger.sqlite") as db:
        (nodes,) = db.execute(
            "SELECT nodes FROM experiments WHERE tool='compile_kernel'"
        ).fetchone()
    assert json.loads(nodes)[0]["node_id"] in (two_nodes.id_a, two_nodes.id_b)  # ran on a node


WORKLOAD = {"num_requests": 16, "input_len": 16, "output_len": 6, "max_concurrency": 4, "seed": 5}


def _relay_gaps(bench: dict) -> list[str]:
    """The findings that would be the relay: a repeat's TTFT far above the engine's histogram, or
    its tokens in bursts (client_engine_gap, or a repeat_remeasured for it that disagreed again).
    A load generator that waited for a CPU is the loaded host, read off the client's own clock: CI
    once saw a repeat wait 31% of its run with two Ray nodes and the engine on 2 cores (remeasured,
    a finding, not the relay's), and client_starved's own words say "bursts": findings are told
    apart by their codes. The relay is in every repeat's path, so a gap it made shows in every
    call; a fresh clone's serial pass once saw one call's TTFT p50 25.2 ms against the engine's
    6.4 ms, and an idle run a load generator starved 25% of a repeat twice (moments of the host on
    2 cores beside two raylets): the test then measures again, up to 4 calls."""
    relay = ("above the engine's own", "tokens arrived in bursts")  # a remeasured repeat's why
    return [
        f
        for f in bench["findings"]
        if f.startswith("client_engine_gap")
        or (
            f.startswith("repeat_remeasured")
            and "disagreed again" in f
            and any(why in f for why in relay)
        )
    ]


@pytest.mark.serial  # its engine and load generator on one host with two nodes' raylets
async def test_an_engine_placed_on_node_b_runs_there_with_its_load_generator(two_nodes, tmp_path):
    """launch_serve with node B's resource: the engine runs in node B's sandbox (a child of an
    actor Ray placed on B, by Ray's own actor table and the process tree), its model folder
    the node's copy of the workspace's; serve_benchmark's load runs there too (Ray's record of
    the actor's tasks), and the engine's own /metrics agree with what the client measured."""
    from mcp import Client

    from infra_agent.server.app import build_server
    from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

    ws = _workspace(tmp_path / "cluster", two_nodes.address)
    build_tiny_checkpoint(ws / "tiny")
    srv = build_server(ws)
    starved = None
    try:
        async with Client(srv) as client:
            try:
                eng = await call(
                    client,
                    "launch_serve",
                    engine="builtin",
                    args={"model": "tiny"},
                    resources={TYPE_B: 0.001},
                )
            except ToolCallError as exc:
                # beside two CPU hogs and two nodes' Ray processes on 2 cores, the engine's session
                # (nice 5) got 1-20% of a CPU and no answer in 300 s: the kernel's account says so
                if "starved it of CPU" not in str(exc):
                    raise
                starved = str(exc)  # skipped below: inside the client, anyio would wrap it
            if starved is None:
                actor = _engine_actor()
                children = _child_commands(actor["pid"])
                priorities = _descendant_nices(actor["pid"])
                with pytest.raises(ToolCallError, match="no live node of the cluster has"):
                    await call(  # Ray would leave it pending: refused, with what the nodes have
                        client,
                        "launch_serve",
                        engine="builtin",
                        resources={"accelerator_type:B200": 1},
                    )
                with pytest.raises(ToolCallError, match="runs on cluster node 127.0.0.1"):
                    await call(client, "profile", handle=eng["handle"], duration_s=1)
                for seed in range(4):  # again when the host, not the relay, read a call late
                    bench = await call(
                        client,
                        "serve_benchmark",
                        handle=eng["handle"],
                        workload=WORKLOAD | {"seed": seed},
                        repeats=2,
                    )
                    if not _relay_gaps(bench):
                        break
                loads = await _task_nodes("EngineNode.run_load")  # while its actor lives
                listed = await call(client, "list_serves")
                stopped = await call(client, "stop_serve", handle=eng["handle"])
    finally:
        await srv.aclose()
    if starved is not None:
        pytest.skip(f"the host starved the engine: {starved}")
    assert eng["node"] == f"127.0.0.1 ({two_nodes.id_b[:12]})", eng
    assert actor["node_id"] == two_nodes.id_b
    assert "bwrap" in children, children  # the engine's sandbox, started by that actor
    # the engine runs at the priority a local one does, not at the Ray worker's nice 15
    assert priorities and {n for _, n in priorities} == {ServiceSpec.nice}, priorities
    assert f"on node 127.0.0.1 ({two_nodes.id_b[:12]})" in eng["summary"]
    m = bench["metrics"]
    assert (m["completed"], m["failed"]) == (16, 0), bench["summary"]
    # the engine's own account (its /metrics, relayed by the node) agrees with the client's
    assert m["prefill_ms"] is not None and m["decode_ms"] is not None
    assert all(r["phases_ms"].get("engine_ttft_p50_ms") for r in bench["repeats"]), bench["repeats"]
    assert not _relay_gaps(bench), "\n".join(bench["findings"])
    assert [s["node"] for s in listed["serves"]] == [eng["node"]]
    assert "on node 127.0.0.1" in stopped["summary"]
    # every load the call ran (the cost probes, then the repeats) ran on B, by Ray's own record
    assert len(loads) >= 2 and set(loads) == {two_nodes.id_b}, loads
    with sqlite3.connect(ws / ".infra-agent" / "ledger.sqlite") as db:
        (nodes,) = db.execute(
            "SELECT nodes FROM experiments WHERE id=?", (bench["experiment_id"],)
        ).fetchone()
    assert [(n["node_id"], n["jobs"]) for n in json.loads(nodes)] == [(two_nodes.id_b, 2)]


SWEEP_SERVE = {  # two configs whose engines each hold a node's one slot
    "engine": "builtin",
    "base_args": {"model": "tiny"},
    "space": {"max_num_seqs": [1, 4]},
    "ladder": {"concurrencies": [2]},
    "workload": {k: v for k, v in WORKLOAD.items() if k != "max_concurrency"},
    "slo": {"ttft_p99_ms": 60000},
    "repeats": 1,
    "resources": {SLOT: 1},
    "race_rounds": 0,  # the ladders side by side (the race relaunches two engines after them)
}


async def test_sweep_serve_measures_its_configs_side_by_side_one_per_node(two_nodes, tmp_path):
    """Each node has one `slot`: a sweep_serve whose engines ask for one measures its two
    configs at once, one on each node (Ray's task events of the load runs), both engines up at
    the same time (the ledger's times of the launches and stops), and answers both."""
    from mcp import Client

    from infra_agent.server.app import build_server
    from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

    ws = _workspace(tmp_path / "cluster", two_nodes.address)
    build_tiny_checkpoint(ws / "tiny")
    before = set(await _task_nodes("EngineNode.run_load", ids=True))
    srv = build_server(ws)
    try:
        async with Client(srv) as client:
            out = await call(
                client,
                "sweep_serve",
                **SWEEP_SERVE,
            )
            # a trial budget of one: one config, though two nodes could take two
            one = await call(
                client,
                "sweep_serve",
                **SWEEP_SERVE,
                budget={"trials": 1},
            )
    finally:
        await srv.aclose()
    assert len(one["configs"]) == 1 and len(one["not_tried"]) == 1, one["summary"]
    assert [c["label"] for c in out["configs"]] == ["max_num_seqs=1", "max_num_seqs=4"], out
    loads = [
        node
        for task, node in await _task_nodes("EngineNode.run_load", ids=True)
        if (task, node) not in before
    ]
    assert set(loads) == {two_nodes.id_a, two_nodes.id_b}, loads
    with sqlite3.connect(ws / ".infra-agent" / "ledger.sqlite") as db:
        calls = db.execute(
            "SELECT tool, started_at FROM experiments WHERE parent_id=? ORDER BY started_at",
            (out["experiment_id"],),
        ).fetchall()
    launched = [t for tool, t in calls if tool == "launch_serve"]
    stopped = [t for tool, t in calls if tool == "stop_serve"]
    # both engines were launched before either was stopped (one at a time: launch, measure,
    # stop, then the next launch)
    assert len(launched) == len(stopped) == 2 and max(launched) < min(stopped), calls


def _engine_actor() -> dict:
    """The live EngineNode actor, from Ray's own actor table (the GCS): its node and pid."""
    import ray

    live = [
        a
        for a in ray._private.state.actors().values()
        if a["ActorClassName"].endswith("EngineNode") and a["State"] == "ALIVE"
    ]
    assert len(live) == 1, live
    return {"node_id": live[0]["Address"]["NodeID"], "pid": live[0]["Pid"]}


async def _task_nodes(name: str, ids: bool = False) -> list:
    """The node of each task named `name` Ray ran (with `ids`: (task id, node) pairs), from the
    task events its GCS keeps: once each has its node and no new one came for 1.5 s (workers
    send their events about once a second)."""
    import ray

    seen, stable_since = -1, time.monotonic()
    for _ in range(100):
        events = [
            e for e in ray._private.state.state._get_all_task_events() if e.task_info.name == name
        ]
        nodes = [e.state_updates.node_id.hex() for e in events]
        if len(events) != seen or not all(nodes):
            seen, stable_since = len(events), time.monotonic()
        elif time.monotonic() - stable_since > 1.5:
            break
        await asyncio.sleep(0.1)
    if ids:
        return [(e.task_id.hex(), node) for e, node in zip(events, nodes)]
    return nodes


def _descendant_nices(pid: int) -> list[tuple[str, int]]:
    """(command, nice) of every process below `pid` but the sandbox's bwrap, by ps."""
    rows = subprocess.run(
        ["ps", "-e", "-o", "pid=,ppid=,ni=,comm="], capture_output=True, text=True
    ).stdout.split("\n")
    procs = [r.split(None, 3) for r in rows if r.strip()]
    below, out = {pid}, []
    for _ in range(8):  # actor -> bwrap -> bwrap -> engine host -> engine
        for p, ppid, ni, comm in procs:
            if int(ppid) in below and int(p) not in below:
                below.add(int(p))
                if comm != "bwrap":
                    out.append((comm, int(ni)))
    return out


def _child_commands(pid: int) -> list[str]:
    out = subprocess.run(["ps", "--ppid", str(pid), "-o", "comm="], capture_output=True, text=True)
    return out.stdout.split()


async def test_node_b_killed_mid_sweep_the_sweep_completes_and_every_row_closes(
    two_nodes, tmp_path
):
    """An engine runs on B too: once B is gone, list_serves reports it lost, naming B. Last in
    the module: node B does not come back."""
    ws = _workspace(tmp_path / "cluster", two_nodes.address)
    engine: dict = {}
    killed_at: list[float] = []

    async def kill_b_once_trials_ran(client) -> None:
        engine.update(
            await call(client, "launch_serve", engine="builtin", resources={TYPE_B: 0.001})
        )
        db = ws / ".infra-agent" / "ledger.sqlite"
        for _ in range(600):
            await asyncio.sleep(0.1)
            if db.exists():
                with sqlite3.connect(db) as conn:
                    (done,) = conn.execute(
                        "SELECT count(*) FROM experiments WHERE parent_id IS NOT NULL "
                        "AND status != 'running'"
                    ).fetchone()
                if done >= 2:
                    break
        await asyncio.to_thread(two_nodes.kill_b)
        killed_at.append(time.time())

    answers = await _sweep(ws, during=kill_b_once_trials_ran, lost=engine)
    out = answers["sweep"]
    (lost,) = answers["serves"]["serves"]
    assert lost["handle"] == engine["handle"] and not lost["alive"], lost
    assert f"its node 127.0.0.1 ({two_nodes.id_b[:12]}) is lost" in lost["exit_cause"], lost
    assert f"{engine['handle']} (builtin) is dead: its node" in answers["serves"]["summary"]
    trials = _children(ws, out["experiment_id"])
    assert trials and all(t["status"] in ("ok", "error") for t in trials), trials
    # a failure names its cause: the node, or (any sweep) a race round too short for microbench
    failed = [t for t in trials if t["status"] == "error"]
    assert all("node" in t["error"] or "budget_ms" in t["error"] for t in failed), failed
    assert out["complete"], out["summary"]
    # B ran trials before it was killed; the trials that started after ran on A alone (beside two
    # CPU hogs the sweep had started every trial before the kill: then there are none to check)
    ran_on = [{n["node_id"] for n in t["nodes"]} for t in trials]
    assert any(two_nodes.id_b in nodes for nodes in ran_on), ran_on
    after = [nodes for t, nodes in zip(trials, ran_on) if t["started_at"] > killed_at[0]]
    assert all(nodes == {two_nodes.id_a} for nodes in after), (after, ran_on)
    with sqlite3.connect(ws / ".infra-agent" / "ledger.sqlite") as db:
        (running,) = db.execute(
            "SELECT count(*) FROM experiments WHERE status='running'"
        ).fetchone()
    assert running == 0
