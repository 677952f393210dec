"""sweep_serve on the built-in engine (tiny checkpoint), through the MCP client: a 2 x 2 sweep with
a TTFT SLO answers a front and a best config whose numbers are its serve_benchmark children's; a
config planted to break the SLO is not chosen and one whose engine cannot start is dropped; a
ladder past capacity stops on over-saturation; a sweep cut by its budget and resumed measures
every (config, step) exactly once, counted in the ledger itself.

What a person should look at: `configs[].stopped` (why each ladder ended) and the front.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path

import anyio
import httpx
import pytest
from conftest import OTHER_DEVICE, ToolCallError, call
from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

WORKLOAD = {"num_requests": 12, "input_len": 16, "output_len": 8, "warmup": 1, "seed": 5}
BASE = {"model": "tiny"}


async def _children(client, sweep_id: str) -> list[dict]:
    listed = json.loads((await client.read_resource(f"experiment://{sweep_id}")).contents[0].text)
    return listed["children"]


async def test_a_sweep_answers_a_front_and_a_best_config_from_its_children(serve_client, server):
    c = serve_client
    out = await call(
        c,
        "sweep_serve",
        base_args=BASE,
        space={"max_num_seqs": [1, 4], "max_num_batched_tokens": [32, 128]},
        workload=WORKLOAD,
        ladder={"concurrencies": [1, 4]},
        slo={"ttft_p99_ms": 5000},
        repeats=1,
        race_rounds=0,  # the ladders' pick (the race: test_sweep_serve_evidence.py)
        expect=["best_value > 0", "front_size >= 1", "highest_load >= 1"],
    )
    hypothesis = out["hypothesis_answer"]
    if hypothesis["answer"] != "supported":
        # honest on a host that starved every step of some config (two CPU hogs did): its
        # highest load is unknown, so only that config's comparisons may be left open
        unjudged = {
            cfg["label"]
            for cfg in out["configs"]
            if not any(s["excluded"] is None and not s["over_saturated"] for s in cfg["steps"])
        }
        left_open = [
            cmp["scope"]
            for cond in hypothesis["conditions"]
            for cmp in cond["comparisons"]
            if cmp["answer"] != "supported"
        ]
        assert hypothesis["answer"] == "inconclusive" and unjudged, hypothesis
        assert set(left_open) <= unjudged, (left_open, unjudged)
    assert len(out["configs"]) == 4 and not out["dropped"] and not out["partial"], out["summary"]
    assert out["front"] and out["best"] in {cfg["label"] for cfg in out["configs"]}
    assert out["mixed_devices"] is None  # one device
    assert out["best_value"] == max(cfg["goodput"] for cfg in out["configs"] if cfg["goodput"])

    # every trial is a child experiment: a launch, its steps, a stop, per config
    children = await _children(c, out["experiment_id"])
    assert [ch["id"] for ch in children] == out["trials"]
    tools = Counter(ch["tool"] for ch in children)
    steps = [s for cfg in out["configs"] for s in cfg["steps"]]
    # a step the host starved is measured again: its first benchmark is a child too, named in
    # the step's set_aside (a fresh clone's xdist pass: 9 benchmarks for 8 steps)
    set_aside = [i for s in steps for i in s["set_aside"]]
    assert tools == {
        "launch_serve": 4,
        "stop_serve": 4,
        "serve_benchmark": len(steps) + len(set_aside),
    }
    assert set(set_aside) <= {ch["id"] for ch in children if ch["tool"] == "serve_benchmark"}

    # the numbers are the serve_benchmark children's own, read from the ledger
    for cfg in out["configs"]:
        for s in cfg["steps"]:
            row = server.state.ledger.get(s["experiment_id"])
            m = row["result"]["metrics"]
            assert s["device_fingerprint"] == row["device_fingerprint"]  # the engines ran here
            assert s["output_throughput"] == m["output_throughput"]
            assert s["goodput"] == m["goodput"] and s["ttft_p50_ms"] == m["ttft_p50"]
            assert s["output_throughput_per_user"] == pytest.approx(
                m["output_throughput"] / s["load"]
            )
        launch = server.state.ledger.get(cfg["launch_id"])
        assert {k: launch["arguments"]["args"][k] for k in cfg["config"]} == cfg["config"]

    # the CSV says what the Output says
    text = (await c.read_resource(f"artifact://{out['experiment_id']}/sweep.csv")).contents[0].text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["serve_benchmark_id"] for r in rows] == [s["experiment_id"] for s in steps]
    for r, s in zip(rows, steps, strict=True):
        assert float(r["output_throughput"]) == pytest.approx(s["output_throughput"])
        assert float(r["load"]) == s["load"] and (r["slo_met"] == "True") == s["slo_met"]
    on_front = {r["serve_benchmark_id"] for r in rows if r["on_front"] == "True"}
    assert on_front == {p["experiment_id"] for p in out["front"]}
    png = (await c.read_resource(f"artifact://{out['experiment_id']}/sweep.png")).contents[0]
    assert png.mime_type == "image/png" and base64.b64decode(png.blob)[:8] == b"\x89PNG\r\n\x1a\n"


async def test_a_planted_slow_config_is_not_chosen_and_a_dead_one_is_dropped(serve_client):
    out = await call(
        serve_client,
        "sweep_serve",
        base_args=BASE,
        configs=[
            {"max_num_seqs": 0, "extra_args": ""},  # refused by launch_serve: dropped
            {"max_num_seqs": 4, "extra_args": "--prefill-delay-ms 400"},  # planted: TTFT > 400 ms
            {"max_num_seqs": 4, "extra_args": ""},
        ],
        workload=WORKLOAD,
        ladder={"concurrencies": [1, 2]},
        slo={"ttft_p99_ms": 300},
        repeats=1,
    )
    assert [d["config"]["max_num_seqs"] for d in out["dropped"]] == [0]
    assert "max_num_seqs" in out["dropped"][0]["reason"]
    planted, normal = out["configs"]
    assert planted["highest_load"] is None and planted["stopped"].startswith(
        "SLO broken at concurrency 1: ttft_p99"
    ), planted["stopped"]
    if out["best_config"] is None:
        # honest beside two CPU hogs (seen once): no step of the normal config both counted and
        # met the SLO (its steps measured the host, a starved load generator, and were kept out
        # of the verdicts), so it was certified at no load and the summary says why
        assert normal["highest_load"] is None, normal
        assert not any(s["excluded"] is None and s["slo_met"] for s in normal["steps"]), normal
        assert "no config met the SLO at any step that counts" in out["summary"], out["summary"]
    else:
        assert out["best_config"] == {"max_num_seqs": 4, "extra_args": ""}, out["summary"]
        assert normal["highest_load"] is not None


@pytest.mark.serial  # throughput flat vs growing, judged on this host: alone (make test)
async def test_a_ladder_past_capacity_stops_on_over_saturation(serve_client):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    args = {
        "base_args": BASE,
        "space": {"max_num_seqs": [1]},
        "workload": {**WORKLOAD, "num_requests": 32, "warmup": 4},
        "ladder": {"concurrencies": [1, 2, 4, 8, 16]},
        "repeats": 2,  # a noisy step's spread counts as noise, not growth
    }
    result = await serve_client.call_tool("sweep_serve", args, progress_callback=on_progress)
    out = result.structured_content
    assert not result.is_error and out is not None, result.content
    (cfg,) = out["configs"]
    shown = [
        (s["load"], s["output_throughput_repeats"], s["ttft_p50_ms"], s["excluded"])
        for s in cfg["steps"]
    ]
    print(cfg["stopped"], shown)
    assert seen[-1][:2] == (1, 1) and "ETA" in seen[-1][2], seen[-1]
    # the children's own progress comes through as it happens: the engine starting, each repeat
    said = [m for _, _, m in seen]
    assert any("max_num_seqs=1: launch: starting the builtin engine" in m for m in said), said
    assert any("max_num_seqs=1: concurrency 1: repeat 1/2" in m for m in said), said
    assert any("max_num_seqs=1: concurrency 1: SLO met" in m for m in said), said
    if not (cfg["stopped"].startswith("over-saturated at concurrency") and len(cfg["steps"]) < 5):
        # Beside two CPU hogs the engine got half a core in one repeat and a whole one in the
        # next (a step's repeats 555 and 1417 tokens/s), or the load generator starved and the
        # step was kept out: then growth and flatness cannot be told apart, and the ladder may
        # run on (over-saturation found at its last step, or not at all). Honest for that host
        # only where its steps show it; on a quiet one the ladder must stop before its end.
        drifted = [
            (s["load"], s["excluded"] or s["output_throughput_repeats"])
            for s in cfg["steps"]
            if s["excluded"]
            or max(s["output_throughput_repeats"]) > 1.4 * min(s["output_throughput_repeats"])
        ]
        assert drifted, (cfg["stopped"], shown)
        pytest.xfail(f"the host drifted under the ladder: {cfg['stopped']}; {drifted}"[:600])
    assert "over-saturated" in seen[-1][2], (seen[-1], shown)
    shown = [(s["load"], s["output_throughput"], s["ttft_p50_ms"]) for s in cfg["steps"]]
    assert cfg["complete"], (cfg["stopped"], shown)  # it stopped before the ladder's end
    ttft = [s["ttft_p50_ms"] for s in cfg["steps"]]
    assert ttft[-1] > ttft[-3]  # requests queue for the one sequence slot


async def test_a_cut_sweep_resumed_measures_every_step_exactly_once(serve_client, server):
    c = serve_client
    args = dict(
        base_args=BASE,
        space={"max_num_seqs": [2, 4]},
        workload=WORKLOAD,
        ladder={"concurrencies": [1, 2]},
        repeats=1,
        race_rounds=0,  # the steps' reuse, counted (the race: test_sweep_serve_evidence.py)
    )
    # 1 s of wall budget: the first config's engine takes longer than that to start, so the
    # budget ends its launch (the engine stopped, the row an error naming the sweep's budget)
    first = await call(c, "sweep_serve", **args, budget={"wall_s": 1})
    assert first["partial"] and first["not_tried"] == [{"max_num_seqs": 4}], first["summary"]
    assert first["configs"][0]["stopped"].startswith("cut during the engine's launch: the "), first
    assert first["measured_steps"] == 0
    first_children = server.state.ledger.children(first["experiment_id"])
    (launch,) = first_children
    assert launch["tool"] == "launch_serve" and launch["status"] == "error", first_children
    assert "ended by sweep_serve's wall budget (budget.wall_s=1 s was spent)" in launch["error"]
    assert (await call(c, "list_serves"))["serves"] == []  # the engine it was starting: gone
    second = await call(c, "sweep_serve", **args, resume=first["experiment_id"])
    assert not second["partial"] and second["reused_steps"] == 0 and second["measured_steps"] == 4

    # the ledger itself: each (config, load) measured by exactly one serve_benchmark
    ledger = server.state.ledger
    rows = ledger.children(first["experiment_id"]) + ledger.children(second["experiment_id"])
    measured = _benchmarks_per_step([r for r in rows if r["status"] == "ok"], second)
    assert measured == {(2, 1): 1, (2, 2): 1, (4, 1): 1, (4, 2): 1}
    assert (
        sum(r["tool"] == "launch_serve" for r in rows) == 3
    )  # the launch the budget ended, 2 more

    # Config 4's steps moved to another device in the ledger, as benchmarks of an engine on
    # another cluster node record them (this host has one device): resumed again, every step is
    # reused, and the answer says the configs' numbers differ by device as well
    other = OTHER_DEVICE
    moved = [s["experiment_id"] for s in second["configs"][1]["steps"]]
    with sqlite3.connect(server.state.workspace.state_dir / "ledger.sqlite") as db:
        for eid in moved:
            (text,) = db.execute("SELECT result FROM experiments WHERE id=?", (eid,)).fetchone()
            result = {**json.loads(text), "device_fingerprint": other}
            db.execute("UPDATE experiments SET result=? WHERE id=?", (json.dumps(result), eid))
    third = await call(c, "sweep_serve", **args, resume=second["experiment_id"])
    assert third["measured_steps"] == 0 and third["reused_steps"] == 4, third["summary"]
    here = second["configs"][0]["steps"][0]["device_fingerprint"]
    assert third["mixed_devices"].startswith(
        f"the configs ran on 2 devices (device {here}: max_num_seqs=2; device {other}: "
        "max_num_seqs=4)"
    ), third["mixed_devices"]
    assert third["mixed_devices"] in third["summary"]


@pytest.mark.parametrize(
    "change, says",
    [
        ({"space": {"max_seqs": [1, 2]}}, "not an engine argument; the space may name: model"),
        ({"space": {}}, "the space is empty"),
        ({"space": {"kernels": ["x"]}}, "set it in base_args"),
        ({"ladder": {"concurrencies": [4, 2]}}, "must increase strictly"),
        ({"ladder": {"concurrencies": list(range(1, 30))}}, "over the cap of 16"),
        ({"ladder": {"concurrencies": [1], "rates": [1]}}, "exactly one of"),
        (
            {"space": {"max_num_seqs": list(range(1, 20)), "max_model_len": list(range(64, 83))}},
            r"361 configs \(19 max_num_seqs x 19 max_model_len\), over the cap of 256",
        ),
        ({"slo": {"ttft_p95_ms": 100}}, "serve_benchmark measures ttft_mean_ms"),
        ({"workload": {"rate": 4}}, "set by the sweep"),
        ({"space": {"extra_args": ["--seed '1"]}}, "config .extra_args=--seed '1.*No closing"),
        ({"budget": {"wall_seconds": 5}}, "wall_seconds"),
        ({"resources": {"GPU": 1}}, "runs on none: start it with --cluster"),
        # what would refuse every step is refused before any engine starts
        ({"slo": {"ttft_p99_ms": 2e7}}, "every step's serve_benchmark would refuse"),
        ({"ladder": {"rates": [0.001]}}, "past serve_benchmark's time budget"),
        (
            {"workload": {"dataset": "sharegpt", "sharegpt_path": "/etc/hostname"}},
            "workload.sharegpt_path: ",
        ),
    ],
)
async def test_bad_input_is_refused_with_what_to_do(serve_client, server, change, says):
    args = {
        "base_args": BASE,
        "space": {"max_num_seqs": [1]},
        "ladder": {"concurrencies": [1]},
        **change,
    }
    with pytest.raises(ToolCallError, match=says):
        await call(serve_client, "sweep_serve", **args)
    # refused up front: no engine was started for it
    assert not server.state.ledger.query(tool="launch_serve")


async def test_every_config_failing_answers_with_the_reasons(serve_client):
    out = await call(
        serve_client,
        "sweep_serve",
        base_args=BASE,
        space={"max_num_seqs": [0], "max_model_len": [0]},
        ladder={"concurrencies": [1]},
    )
    assert out["configs"] == [] and out["best"] is None and len(out["dropped"]) == 1
    assert "no config met the SLO" in out["summary"] and out["dropped"][0]["reason"]


def _ok_benchmarks(ledger: Path) -> int:
    """serve_benchmark rows that ended well, read by the test itself, off the server's ledger."""
    if not ledger.exists():
        return 0
    with sqlite3.connect(ledger, timeout=5) as db:
        rows = db.execute(
            "SELECT COUNT(*) FROM experiments WHERE tool='serve_benchmark' AND status='ok'"
        ).fetchall()
    return rows[0][0]


def _serve_http(workspace: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "INFRA_AGENT_TOKEN"}
    command = [sys.executable, "-m", "infra_agent.server", "--http", "--port", str(port)]
    command += ["--workspace", str(workspace), "--shutdown-grace", "1"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def _wait(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def _up(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
        return True
    except httpx.TransportError:
        return False


async def test_a_sweep_whose_server_shut_down_resumes_measuring_each_step_once(tiny_workspace):
    """The server stops (SIGTERM) mid-sweep; a new server on the same workspace resumes the
    interrupted sweep: what was measured before is reused, the rest measured, none twice."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from infra_agent.server.app import build_server
    from infra_agent.serving.lifecycle import free_port

    args = dict(
        base_args=BASE,
        space={"max_num_seqs": [2, 4]},
        workload=WORKLOAD,
        ladder={"concurrencies": [1, 2, 4]},
        repeats=1,
        race_rounds=0,
    )
    ledger = tiny_workspace / ".infra-agent" / "ledger.sqlite"
    port = free_port()
    proc = _serve_http(tiny_workspace, port)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await anyio.to_thread.run_sync(_wait, partial(_up, url), "the server up")

        async def sweep() -> None:
            try:
                async with Client(streamable_http_client(url)) as client:
                    await client.call_tool("sweep_serve", args)
            except Exception:  # noqa: BLE001 - the server goes away mid-call: that is the point
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(sweep)
            await anyio.to_thread.run_sync(
                _wait, lambda: _ok_benchmarks(ledger) >= 2, "two steps measured"
            )
            proc.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(partial(proc.wait, timeout=60))
            tg.cancel_scope.cancel()
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _ok_benchmarks(ledger)
    assert 2 <= before < 6  # cut mid-sweep

    srv = build_server(tiny_workspace)
    try:
        async with Client(srv) as c:
            (cut,) = srv.state.ledger.query(tool="sweep_serve")
            assert cut["status"] == "interrupted", cut["status"]
            out = await call(c, "sweep_serve", **args, resume=cut["id"])
            now = srv.state.ledger.children(out["experiment_id"])
            rows = srv.state.ledger.children(cut["id"]) + now
    finally:
        await srv.aclose()
    assert not out["partial"] and out["reused_steps"] >= 1, out["summary"]
    assert out["reused_steps"] + out["measured_steps"] == 6
    # every benchmark the cut sweep made is used again (a step's, or one a starved step set
    # aside and measured again: the replay makes the same calls), only the rest is measured now
    made_now = [r for r in now if r["tool"] == "serve_benchmark" and r["status"] == "ok"]
    used = sum(1 + len(step["set_aside"]) for cfg in out["configs"] for step in cfg["steps"])
    assert before + len(made_now) == used, (before, len(made_now), out["summary"])
    measured = _benchmarks_per_step([r for r in rows if r["status"] == "ok"], out)
    assert measured == {(s, c): 1 for s in (2, 4) for c in (1, 2, 4)}, measured


def _benchmarks_per_step(rows: list[dict], answer: dict) -> Counter:
    """(max_num_seqs, max_concurrency) -> how many of the ledger's ok serve_benchmark rows stand
    for that step. A benchmark a step set aside (the host starved it, so the sweep measured the
    step again: issue 35 item 3; a fresh clone's xdist pass did) is not counted: it must be a
    benchmark of that same step, named in the answer's step."""
    config_of = {
        r["result"]["handle"]: r["arguments"]["args"]["max_num_seqs"]
        for r in rows
        if r["tool"] == "launch_serve"
    }
    step_of = {
        r["id"]: (
            config_of[r["arguments"]["handle"]],
            r["arguments"]["workload"]["max_concurrency"],
        )
        for r in rows
        if r["tool"] == "serve_benchmark"
    }
    set_aside = set()
    for cfg in answer["configs"]:
        for step in cfg["steps"]:
            kept = step_of[step["experiment_id"]]
            assert all(step_of[i] == kept for i in step["set_aside"]), (step, step_of)
            set_aside.update(step["set_aside"])
    return Counter(where for i, where in step_of.items() if i not in set_aside)


async def test_a_rate_ladder_counts_users_by_littles_law(serve_client, server):
    out = await call(
        serve_client,
        "sweep_serve",
        base_args=BASE,
        space={"max_num_seqs": [4]},
        workload=WORKLOAD,
        ladder={"rates": [8, 16]},
        slo={"e2el_p99_ms": 5000},
        repeats=1,
    )
    assert out["load_kind"] == "rate"
    for s in out["configs"][0]["steps"]:
        m = server.state.ledger.get(s["experiment_id"])["result"]["metrics"]
        in_flight = m["request_throughput"] * m["e2el_mean"] / 1e3  # mean requests in flight
        assert s["output_throughput_per_user"] == pytest.approx(m["output_throughput"] / in_flight)
        assert s["slo_values"]["e2el_p99_ms"][1] == m["e2el_p99"]


async def test_the_same_sweep_runs_on_transformers_serve(serve_client, server):
    """sweep_serve works with every engine adapter: here a real third-party engine (no /metrics),
    its --cb-max-batch-tokens swept; the answer's numbers are its children's, from the ledger."""
    out = await call(
        serve_client,
        "sweep_serve",
        engine="transformers",
        base_args=BASE,
        space={"max_num_batched_tokens": [64, 256]},
        workload={**WORKLOAD, "num_requests": 8},
        ladder={"concurrencies": [1, 4]},
        slo={"ttft_p99_ms": 60000},
        repeats=1,
        race_rounds=2,  # its first look (two rounds): two transformers engines side by side
        race_repeat_s=0,  # the workload's 8 requests a repeat (the sizing: the evidence tests)
    )
    assert len(out["configs"]) == 2 and not out["dropped"], out["summary"]
    assert out["race"] is not None and out["race"]["rounds"] == 2, out["summary"]
    assert out["best"] in {cfg["label"] for cfg in out["configs"]} and out["front"]
    for cfg in out["configs"]:
        launch = server.state.ledger.get(cfg["launch_id"])
        assert launch["arguments"]["engine"] == "transformers"
        assert (
            launch["arguments"]["args"]["max_num_batched_tokens"]
            == cfg["config"]["max_num_batched_tokens"]
        )
        for s in cfg["steps"]:
            row = server.state.ledger.get(s["experiment_id"])
            m = row["result"]["metrics"]
            assert s["device_fingerprint"] == row["device_fingerprint"]  # the engines ran here
            assert s["output_throughput"] == m["output_throughput"] > 0
            assert m["completed"] == 8 and m["failed"] == 0
