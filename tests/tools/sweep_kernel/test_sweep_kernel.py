"""sweep_kernel through the MCP client, on the zoo's rmsnorm and on a planted variant of it.

Each sweep's numbers are checked against a second source: the ledger rows of its child calls,
read with sqlite3 (what compile_kernel, check_numerics and microbench themselves answered), and
the CSV it wrote.
"""

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest
from conftest import OTHER_DEVICE, ToolCallError, call, record_on_node

pytestmark = pytest.mark.anyio

ZOO_RMSNORM = Path(__file__).resolve().parents[3] / "kernels" / "rmsnorm" / "rmsnorm_triton.py"

# The zoo's rmsnorm with its launch choices as keyword parameters (so the entry derives ONE_BLOCK
# from the BLOCK_N it is given) and two planted knobs: SLOW launches the kernel four times (a
# deliberate extra loop: the same answer, four times the work); OFF_BY_ONE leaves the last column
# of every row unwritten (cols < N - 1).
PLANTED = (
    ZOO_RMSNORM.read_text()
    .replace("from reference import EPS", "EPS = 1e-6  # inline source: no sibling reference.py")
    .replace(
        "def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:",
        "def rmsnorm(x, weight, BLOCK_N=None, SLOW=0, OFF_BY_ONE=0):",
    )
    .replace(
        "    BLOCK_N = min(triton.next_power_of_2(N), MAX_FUSED_BYTES // x.element_size())\n",
        "    BLOCK_N = BLOCK_N or min(triton.next_power_of_2(N), MAX_FUSED_BYTES // x.element_size())\n",
    )
    .replace(
        "    rmsnorm_kernel[(M,)](x, weight, y, x.stride(0), y.stride(0), N, EPS,",
        "    for _ in range(4 if SLOW else 1):\n"
        "      rmsnorm_kernel[(M,)](x, weight, y, x.stride(0), y.stride(0), N - OFF_BY_ONE, EPS,",
    )
)
SHAPES = [{"M": 4, "N": 64}, {"M": 8, "N": 128}]


def _ledger(workspace: Path) -> sqlite3.Connection:
    db = sqlite3.connect(workspace / ".infra-agent" / "ledger.sqlite")
    db.row_factory = sqlite3.Row
    return db


def _keys(workspace: Path, sweep_id: str, ok: bool = False) -> set[str]:
    """The calls a sweep made (with `ok`: those that answered), as (tool, arguments)."""
    return {
        f"{c['tool']} {json.dumps(c['arguments'], sort_keys=True)}"
        for c in _children(workspace, sweep_id)
        if not ok or c["status"] == "ok"
    }


def _children(workspace: Path, sweep_id: str) -> list[dict]:
    with _ledger(workspace) as db:
        rows = db.execute(
            "SELECT * FROM experiments WHERE parent_id=? ORDER BY seq", (sweep_id,)
        ).fetchall()
    return [
        {
            **dict(r),
            "arguments": json.loads(r["arguments"]),
            "result": json.loads(r["result"] or "null"),
        }
        for r in rows
    ]


async def _csv(client, out: dict) -> list[dict]:
    uri = next(a for a in out["artifacts"] if a.endswith("sweep.csv"))
    text = (await client.read_resource(uri)).contents[0].text
    return list(csv.DictReader(io.StringIO(text)))


async def test_planted_slow_and_wrong_configs_never_win(zoo_client, zoo_workspace):
    configs = [
        {"BLOCK_N": 256, "SLOW": 0, "OFF_BY_ONE": 0},
        {"BLOCK_N": 256, "SLOW": 1, "OFF_BY_ONE": 0},
        {"BLOCK_N": 256, "SLOW": 0, "OFF_BY_ONE": 1},
        {"BLOCK_N": 512, "SLOW": 0, "OFF_BY_ONE": 0},
    ]
    out = await call(
        zoo_client,
        "sweep_kernel",
        kernel="rmsnorm",
        source=PLANTED,
        entry="rmsnorm",
        configs=configs,
        shapes=SHAPES,
        dtype="float32",
        target="sm_90a",
        round_ms=100,
        tie_margin_pct=5,
        hypothesis="the planted configs never win",
        expect=["passed_numerics == 3", "winner != 'BLOCK_N=256 SLOW=1 OFF_BY_ONE=0'"],
    )
    assert out["hypothesis_answer"]["answer"] == "supported", out["hypothesis_answer"]
    rows = {json.dumps(r["config"], sort_keys=True): r for r in out["configs"]}
    wrong = rows[json.dumps(configs[2], sort_keys=True)]
    assert wrong["stage"] == "numerics" and "numerics fail" in wrong["dropped"]
    slow = configs[1]
    for shape in out["shapes"]:
        assert shape["winner"] is not None and shape["winner"] != slow, shape
        assert shape["winner"]["OFF_BY_ONE"] == 0 and shape["winner"]["SLOW"] == 0
    assert out["best"] is not None and out["best"]["SLOW"] == 0 and out["best"]["OFF_BY_ONE"] == 0
    assert out["complete"] and out["tried"] == 4 and out["compiled"] == 4
    assert out["passed_numerics"] == 3 and out["sampler"] == "grid"
    assert "CPU timings of interpreted Triton rank CPU work" in out["summary"]

    # Second source: the children in the ledger, as the tools themselves answered.
    children = _children(zoo_workspace, out["experiment_id"])
    by_tool = {}
    for child in children:
        by_tool.setdefault(child["tool"], []).append(child)
    assert len(by_tool["compile_kernel"]) == 4 and len(by_tool["check_numerics"]) == 4
    verdicts = {
        json.dumps(c["arguments"]["launch_config"], sort_keys=True): c["result"]["verdict"]
        for c in by_tool["check_numerics"]
    }
    assert verdicts[json.dumps(configs[2], sort_keys=True)] == "fail"
    assert sum(v == "pass" for v in verdicts.values()) == 3
    # The slow config, where it was timed against the plain one, was slower per microbench itself.
    plain, slowed = json.dumps(configs[0], sort_keys=True), json.dumps(slow, sort_keys=True)
    for bench in by_tool["microbench"]:
        pair = {
            json.dumps(bench["arguments"][k], sort_keys=True)
            for k in ("launch_config", "baseline_launch_config")
        }
        if pair == {plain, slowed} and bench["status"] == "ok":  # a too-short budget is an error
            row = bench["result"]["shapes"][0]
            slow_is_candidate = (
                json.dumps(bench["arguments"]["launch_config"], sort_keys=True) == slowed
            )
            assert (row["ratio"] > 1) == slow_is_candidate, row
    # Every child names this sweep; the CSV says what the Output says.
    table = await _csv(zoo_client, out)
    assert len(table) == 4
    for line in table:
        config = {k[4:]: int(v) for k, v in line.items() if k.startswith("cfg.")}
        row = rows[json.dumps(config, sort_keys=True)]
        assert line["stage"] == row["stage"] and line["dropped"] == (row["dropped"] or "")
        assert set(line["trials"].split()) == set(row["trials"])
    listed = json.loads(
        (await zoo_client.read_resource(f"experiment://{out['experiment_id']}")).contents[0].text
    )
    assert [c["id"] for c in listed["children"]] == [c["id"] for c in children]
    # The CSV's wins name every shape a config won, as the Output's shapes do.
    for line in table:
        config = {k[4:]: int(v) for k, v in line.items() if k.startswith("cfg.")}
        won = {
            ",".join(f"{k}={v}" for k, v in s["shape"].items())
            for s in out["shapes"]
            if s["winner"] == config
        }
        assert set(line["wins"].split()) == won, (line, won)

    # Third source: microbench's own interleaved A/B, made outside the sweep, of each shape's
    # winner against every other config that passed numerics: the winner is never measurably
    # slower than one (beyond the tie margin), and it beats the planted slow config.
    for shape in out["shapes"]:
        for other in (configs[0], configs[1], configs[3]):
            if other == shape["winner"]:
                continue
            ab = await call(
                zoo_client,
                "microbench",
                kernel="rmsnorm",
                source=PLANTED,
                entry="rmsnorm",
                launch_config=shape["winner"],
                baseline_source=PLANTED,
                baseline_entry="rmsnorm",
                baseline_launch_config=other,
                shapes=[shape["shape"]],
                dtype="float32",  # the default budget: timing goes on to 5 calls an arm
            )
            row = ab["shapes"][0]
            assert row["ci_low"] <= 1.05, (shape["winner"], other, row)  # never slower
            if other == slow:
                assert row["ci_high"] < 1.0, (shape["winner"], row)  # 4x the work: slower


async def test_constraints_drop_configs_at_compile_with_the_compilers_numbers(
    zoo_client, zoo_workspace
):
    lines: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done, total, message):
        lines.append((done, total, message))

    result = await zoo_client.call_tool(
        "sweep_kernel",
        {
            "kernel": "rmsnorm",
            "space": {"BLOCK_N": [64, 128], "num_warps": [1, 4]},
            "shapes": [{"M": 4, "N": 64}],
            "dtype": "float32",
            "target": "sm_90a",
            "constraints": ["threads_per_block <= 64"],
        },
        progress_callback=on_progress,
    )
    out = result.structured_content
    assert out is not None, result.content
    # A line per trial: what ran and how it ended, the count so far, an ETA.
    assert len(lines) == out["trials_made"] and lines[-1][0] == out["trials_made"]
    assert "compile_kernel BLOCK_N=" in lines[0][2] and "ETA" in lines[0][2]
    assert any("check_numerics" in m and ": ok" in m for _, _, m in lines)
    dropped = [r for r in out["configs"] if r["dropped"]]
    assert {r["config"]["num_warps"] for r in dropped} == {4}
    assert all(
        r["stage"] == "compile" and "threads_per_block <= 64" in r["dropped"] for r in dropped
    )
    assert out["compiled"] == 2 and out["shapes"][0]["winner"]["num_warps"] == 1
    # What the compiler said for the dropped configs, read from their compile_kernel rows.
    for child in _children(zoo_workspace, out["experiment_id"]):
        if child["tool"] == "compile_kernel":
            warps = child["arguments"]["launch_config"]["num_warps"]
            assert child["result"]["kernels"][0]["threads_per_block"] == 32 * warps


async def test_bad_inputs_are_clear_errors(zoo_client):
    cases = [
        ({"space": {}}, "the space is empty"),
        ({"configs": [{"BLOCK_N": 64}, {"num_warps": 4}]}, "same keys"),
        ({"space": {"BLOCK_N": [64]}, "constraints": ["no_such_field == 0"]}, "no_such_field"),
        ({"space": {"BLOCK_N": [64]}, "resume": "e99999-0000"}, "no such experiment"),
        ({"space": {"BLOCK_N": {"start": 64, "stop": 32, "factor": 2}}}, "below its start"),
        # x is rmsnorm's first input, which the entry already receives by position
        ({"space": {"x": [1, 2]}}, "already receives as one of rmsnorm's inputs"),
    ]
    for extra, says in cases:
        with pytest.raises(ToolCallError, match=says):
            await call(
                zoo_client, "sweep_kernel", kernel="rmsnorm", shapes=[{"M": 4, "N": 64}], **extra
            )


async def test_every_config_failing_is_an_answer_with_the_reasons(zoo_client):
    out = await call(
        zoo_client,
        "sweep_kernel",
        kernel="rmsnorm",
        space={"BLOCK_N": [16, 32]},  # the zoo's entry keeps ONE_BLOCK=True: N=64 is cut short
        shapes=[{"M": 4, "N": 64}],
        dtype="float32",
        target="sm_90a",
    )
    assert out["passed_numerics"] == 0 and out["best"] is None
    assert out["shapes"][0]["winner"] is None and "no config survived" in out["summary"]
    assert all(r["stage"] == "numerics" and "numerics fail" in r["dropped"] for r in out["configs"])


async def test_a_space_over_the_cap_is_sampled_by_optuna_within_the_trial_budget(
    zoo_client, zoo_workspace
):
    space = {
        "BLOCK_N": [64, 128, 256, 512],
        "num_warps": [1, 2, 4, 8, 16, 32],
        "num_stages": [1, 2, 3, 4, 5, 6, 7, 8],
        "SLOW": [0, 1],
    }
    out = await call(
        zoo_client,
        "sweep_kernel",
        kernel="rmsnorm",
        source=PLANTED,
        entry="rmsnorm",
        space=space,
        shapes=[{"M": 4, "N": 64}],
        dtype="float32",
        target="sm_90a",
        budget={"trials": 3},
        seed=3,
    )
    assert out["sampler"] == "optuna" and out["space_size"] == 384
    assert out["tried"] == 3 and out["seen_fraction"] == pytest.approx(3 / 384)
    tried = [r for r in out["configs"] if r["stage"] != "not_tried"]
    assert len(tried) == 3 and len({json.dumps(r["config"], sort_keys=True) for r in tried}) == 3
    compiles = [
        c for c in _children(zoo_workspace, out["experiment_id"]) if c["tool"] == "compile_kernel"
    ]
    assert len(compiles) == 3  # one per sampled config, none twice
    assert out["shapes"][0]["winner"] is not None


async def test_a_budget_ends_the_sweep_with_a_partial_answer_that_resume_completes(zoo_client):
    args = {
        "kernel": "rmsnorm",
        "space": {"BLOCK_N": [64, 128], "num_warps": [1, 2]},
        "shapes": [{"M": 4, "N": 64}],
        "dtype": "float32",
        "target": "sm_90a",
        "round_ms": 100,
        "tie_margin_pct": 5,
    }
    cut = await call(zoo_client, "sweep_kernel", **args, budget={"trials": 2})
    assert not cut["complete"] and "trial budget (2)" in cut["stopped_because"]
    assert cut["tried"] == 2 and "Partial" in cut["summary"]
    assert [r["stage"] for r in cut["configs"]].count("not_tried") == 2
    done = await call(zoo_client, "sweep_kernel", **args, resume=cut["experiment_id"])
    assert done["complete"] and done["tried"] == 4
    # the two configs the cut sweep compiled and checked were answered from its record
    assert done["trials_reused"] >= 4 and done["trials_made"] >= 4
    nothing = await call(zoo_client, "sweep_kernel", **args, budget={"wall_s": 0.001})
    assert not nothing["complete"] and "wall-clock budget" in nothing["stopped_because"]
    # the compiles that had started (two at once) finish; nothing after them starts
    assert nothing["tried"] <= 2 and nothing["best"] is None
    assert all(r["stage"] in ("compile", "not_tried") for r in nothing["configs"])


async def test_a_resume_measures_again_what_ran_code_that_changed_since(zoo_client, zoo_workspace):
    """resume= reuses a recorded trial only when the files it ran are unchanged (its code
    snapshot): after an edit every trial is made again and the answer says how many and why;
    resuming that sweep with nothing changed reuses all of them. Counted in the ledger."""
    args = {
        "kernel": "rmsnorm",
        "space": {"num_warps": [1, 2]},
        "shapes": [{"M": 4, "N": 64}],
        "dtype": "float32",
        "target": "sm_90a",
        "round_ms": 100,
    }
    first = await call(zoo_client, "sweep_kernel", **args)
    kernel_file = zoo_workspace / "rmsnorm" / "rmsnorm_triton.py"
    original = kernel_file.read_text()
    kernel_file.write_text(original + "\n# an edit: same kernel, different file\n")
    try:
        second = await call(zoo_client, "sweep_kernel", **args, resume=first["experiment_id"])
        third = await call(zoo_client, "sweep_kernel", **args, resume=second["experiment_id"])
    finally:
        kernel_file.write_text(original)
    # every call the second sweep repeats was recorded with the old file: none is reused; the
    # two compiles and two numerics checks at least are made again (the race may differ)
    assert second["trials_reused"] == 0
    assert 4 <= second["trials_remeasured"] <= first["trials_made"]
    assert "measured again: their code changed since" in second["summary"]
    assert len(_children(zoo_workspace, second["experiment_id"])) == second["trials_made"]
    # nothing changed since the second: its compiles and checks are reused. A race may still time
    # a pairing the second did not answer (timing decides the pairings, and under load a round
    # can be too short for microbench: an error, never reused): its one reusable record is the
    # first's, which ran the old file, so it is measured again, and counted so
    assert third["trials_reused"] >= 4
    only_first = _keys(zoo_workspace, first["experiment_id"], ok=True) - _keys(
        zoo_workspace, second["experiment_id"], ok=True
    )
    assert third["trials_remeasured"] <= len(only_first)
    assert len(_children(zoo_workspace, third["experiment_id"])) == third["trials_made"]


async def test_configs_timed_on_different_devices_are_named(zoo_client, zoo_workspace):
    """Each A/B pair is one microbench job on one device, but a sweep's medians, winners and
    best config gather pairs from every job; on a cluster whose nodes differ those ran on
    different devices, and the answer must say which configs ran where. This host has one
    device: one pair's row is moved to another node's device in the ledger, as the executor
    records a job there, and the sweep resumed from its record says so."""
    args = {
        "kernel": "rmsnorm",
        "space": {"num_warps": [1, 2, 4]},
        "shapes": [{"M": 4, "N": 64}],
        "dtype": "float32",
        "target": "sm_90a",
        "round_ms": 100,
        "strategy": "grid",  # every config against the first, once: two pairs
    }
    first = await call(zoo_client, "sweep_kernel", **args)
    assert first["mixed_devices"] is None, first["mixed_devices"]  # one device
    pairs = [
        c
        for c in _children(zoo_workspace, first["experiment_id"])
        if c["tool"] == "microbench" and c["status"] == "ok"
    ]
    assert len(pairs) == 2, [c["arguments"] for c in pairs]
    moved = pairs[0]
    labels = {
        f"num_warps={moved['arguments'][k]['num_warps']}"
        for k in ("launch_config", "baseline_launch_config")
    }
    other = OTHER_DEVICE
    record_on_node(zoo_workspace, moved["id"], other)
    again = await call(zoo_client, "sweep_kernel", **args, resume=first["experiment_id"])
    assert again["trials_made"] == 0, again["summary"]
    note = again["mixed_devices"]
    assert note and note.startswith("the configs ran on 2 devices"), note
    on_other = note.split(f"device {other}: ")[1].split(";")[0].split(")")[0]
    assert set(on_other.split(", ")) == labels, (note, labels)
    assert f"Mixed devices: {note}" in again["summary"]
