"""baseline=<experiment id> runs the code that experiment ran (its snapshot), never today's
file: the issue's reproduction (edit the impl, then time it against the earlier experiment)
through the MCP client and the real sandbox. The tests share one server (zoo_client) and its
workspace copy; each edits its own files."""

import json
from pathlib import Path

import pytest
from conftest import ToolCallError, call

from infra_agent.server.ledger import Ledger

pytestmark = pytest.mark.anyio

IMPL = "vector_add/vector_add_triton.py"
LAUNCH = "    vector_add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)\n"
# The same answer, eight launches of the kernel instead of one: clearly more work per call.
LAUNCH_8X = "    for _ in range(8):\n    " + LAUNCH
TORCH_ADD = "def add(x, y):\n    return x + y\n"
SHAPE = [{"N": 1000}]  # one program of BLOCK_SIZE=1024: the interpreter's cost is per launch


async def _code(client, experiment_id: str) -> dict:
    res = await client.read_resource(f"experiment://{experiment_id}")
    return json.loads(res.contents[0].text)["code"]


async def test_an_edited_impl_is_timed_against_the_code_the_baseline_ran(
    zoo_client, zoo_workspace: Path
):
    # budgets with room for a loaded machine: the interpreter's first calls in a fresh sandbox are slow
    before = await call(
        zoo_client, "microbench", kernel="vector_add", impl="triton", shapes=SHAPE, budget_ms=3000
    )
    impl = zoo_workspace / IMPL
    assert LAUNCH in impl.read_text()
    impl.write_text(impl.read_text().replace(LAUNCH, LAUNCH_8X))

    after = await call(
        zoo_client,
        "microbench",
        kernel="vector_add",
        impl="triton",
        baseline=before["experiment_id"],
        shapes=SHAPE,
        budget_ms=6000,
    )
    shape = after["shapes"][0]
    # 8 launches against 1: the baseline job ran the recorded one-launch file, not today's (an A/A
    # would give a ratio near 1 with a CI around it)
    print("after the edit:", after["summary"])
    assert shape["verdict"] == "slower", after["summary"]
    assert shape["ci_low"] > 1.5, shape
    assert (
        shape["candidate"]["spot_check"] == "passed" and shape["baseline"]["spot_check"] == "passed"
    )
    assert "its recorded code" in shape["baseline"]["code"]

    code_before = await _code(zoo_client, before["experiment_id"])
    code_after = await _code(zoo_client, after["experiment_id"])
    assert code_before["files"][IMPL]["sha256"] != code_after["files"][IMPL]["sha256"]
    for rel in (
        "vector_add/spec.py",
        "vector_add/reference.py",
    ):  # the kernel's folder, siblings included
        assert code_before["files"][rel]["sha256"] == code_after["files"][rel]["sha256"]
    # the recorded bytes are served back, and they are the file as it was
    uri = code_before["files"][IMPL]["uri"]
    served = await zoo_client.read_resource(uri)
    assert (
        served.contents[0].text.count("vector_add_kernel[grid]") == 1
        and "range(8)" not in served.contents[0].text
    )

    cmp = await call(
        zoo_client, "compare_experiments", a=before["experiment_id"], b=after["experiment_id"]
    )
    assert cmp["code"]["same_code"] is False and cmp["code"]["basis"] == "snapshot"
    [changed] = cmp["code"]["files"]
    assert changed["path"] == IMPL and changed["change"] == "modified"
    assert "+    for _ in range(8):" in changed["diff"] and changed["lines_added"] == 2
    # after's baseline arm reran before's code: how the two timed it is said first
    assert cmp["summary"].startswith("conditions "), cmp["summary"]
    assert cmp["conditions"][0]["arm_b"] == "baseline"
    assert (
        f"verdict measured -> slower; code differs: candidate {IMPL}:vector_add edited"
        in cmp["summary"]
    ), cmp["summary"]


async def test_a_rerun_imports_the_recorded_siblings_of_the_file(zoo_client, zoo_workspace: Path):
    """path= code importing a helper beside it: the helper is in the snapshot, and the rerun
    imports the recorded helper, not today's edited one."""
    (zoo_workspace / "mine").mkdir()
    (zoo_workspace / "mine" / "add_impl.py").write_text(
        "from add_helper import work\n\n\ndef add(x, y):\n    return work(x, y)\n"
    )
    helper = zoo_workspace / "mine" / "add_helper.py"
    helper.write_text("def work(x, y):\n    return x + y\n")
    args = {"kernel": "vector_add", "path": "mine/add_impl.py", "entry": "add", "shapes": SHAPE}
    before = await call(zoo_client, "microbench", **args, budget_ms=500)
    # the same answer after 400 discarded additions: far more work per call
    helper.write_text(
        "def work(x, y):\n    for _ in range(400):\n        x.add(y)\n    return x + y\n"
    )
    after = await call(
        zoo_client, "microbench", **args, baseline=before["experiment_id"], budget_ms=1500
    )
    print("after the helper's edit:", after["summary"])
    assert after["shapes"][0]["verdict"] == "slower" and after["shapes"][0]["ci_low"] > 2, after[
        "summary"
    ]
    cmp = await call(
        zoo_client, "compare_experiments", a=before["experiment_id"], b=after["experiment_id"]
    )
    assert [f["path"] for f in cmp["code"]["files"]] == [
        "mine/add_helper.py"
    ]  # add_impl.py: same hash


async def test_same_code_without_git_and_no_seeds_among_numeric_changes(zoo_client):
    a = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        impl="triton",
        dtypes=["float32"],
        shapes=[{"N": 1000}],
        trials=1,
    )
    b = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        impl="triton",
        dtypes=["float32"],
        shapes=[{"N": 1000}],
        trials=1,
    )
    cmp = await call(zoo_client, "compare_experiments", a=a["experiment_id"], b=b["experiment_id"])
    assert cmp["code"] == {**cmp["code"], "same_code": True, "basis": "snapshot", "files": []}
    assert cmp["code"]["commit_a"] is None  # the copied zoo is no git checkout
    assert "same code" in cmp["summary"] and cmp["summary"].startswith("verdict pass (both)")
    assert not [c for c in cmp["numeric_changes"] if "seed" in c["field"] or "index" in c["field"]]
    assert cmp["num_identifiers_changed"] >= 1  # each call draws its own seeds


async def test_a_ledger_row_without_a_snapshot_is_refused_with_what_to_do(
    zoo_client, zoo_workspace: Path
):
    first = await call(
        zoo_client,
        "microbench",
        kernel="vector_add",
        source=TORCH_ADD,
        entry="add",
        shapes=SHAPE,
        budget_ms=200,
    )
    ledger = Ledger(
        zoo_workspace / ".infra-agent" / "ledger.sqlite"
    )  # a second connection, as a CLI has
    ledger._write(
        "UPDATE experiments SET code=NULL WHERE id=?", (first["experiment_id"],)
    )  # an old row
    ledger.close()
    with pytest.raises(ToolCallError) as err:
        await call(
            zoo_client,
            "microbench",
            kernel="vector_add",
            impl="triton",
            baseline=first["experiment_id"],
            shapes=SHAPE,
            budget_ms=200,
        )
    message = str(err.value)
    assert "recorded before experiments kept the code they ran" in message
    assert "Rerun that code now" in message and "baseline=<impl>" in message
