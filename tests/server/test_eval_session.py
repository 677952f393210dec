"""Issue 38, item 2: an eval task answered by any MCP client, not the runner's agent. A real
stdio session (the MCP SDK's client against `python -m infra_agent.server --eval-submit`)
on a workspace `infra-agent eval prepare` wrote calls the tools, submits twice (the last
submission counts), and `infra-agent eval grade` grades it with the runner's grading; the
graded folder renders as eval pages like any results folder."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest
from eval_policies import Investigator
from typer.testing import CliRunner

from infra_agent.server.cli import app
from infra_agent.server.eval.session import SESSION_FILE
from infra_agent.server.eval.submit import NAME as SUBMIT
from infra_agent.server.eval.tasks import generate_tasks

runner = CliRunner()
TASK, SEED = "kernel.tail_mask", 0


def ledger_rows(folder: Path) -> list[sqlite3.Row]:
    """The session's top-level calls, read with sqlite3 (not the server's ledger code)."""
    conn = sqlite3.connect(folder / "workspace" / ".infra-agent" / "ledger.sqlite")
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(
            "SELECT * FROM experiments WHERE parent_id IS NULL ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_mcp_client_session_is_prepared_served_and_graded(tmp_path):
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    folder = tmp_path / "session"
    prepared = runner.invoke(
        app, ["eval", "prepare", "--task", TASK, "--seed", str(SEED), str(folder)]
    )
    assert prepared.exit_code == 0, prepared.output
    (task,) = generate_tasks(SEED, [TASK])
    assert task.question in prepared.stdout and "--eval-submit" in prepared.stdout
    assert f"infra-agent eval grade {folder}" in prepared.stdout
    session = json.loads((folder / SESSION_FILE).read_text())
    assert (session["task_id"], session["seed"]) == (TASK, SEED)
    # the truth stays out of the workspace the client opens (the session file beside it names
    # the task, whose id names its family, but holds no truth)
    workspace = folder / "workspace"
    on_disk = " ".join(p.read_text() for p in workspace.rglob("*") if p.is_file())
    assert "truth" not in session and task.truth.cause.value not in on_disk

    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "infra_agent.server",
            "--workspace",
            str(folder / "workspace"),
            "--eval-submit",
        ],
    )
    async with Client(stdio_client(params, errlog=sys.stderr), read_timeout_seconds=600) as client:
        assert SUBMIT in {t.name for t in (await client.list_tools()).tools}
        # what a client reads off the question, as the scripted investigator does
        kernel = re.search(r"the kernel (\w+)", session["question"]).group(1)
        impls = re.search(r"implementations \(([^)]*)\)", session["question"]).group(1)
        numerics, compiles = {}, {}
        for impl in [i.strip() for i in impls.split(",")]:
            args = {"kernel": kernel, "impl": impl}
            numerics[impl] = (
                await client.call_tool("check_numerics", {**args, "trials": 1})
            ).structured_content
            compiles[impl] = (
                await client.call_tool("compile_kernel", {**args, "target": "sm_90a"})
            ).structured_content
        found = {i: Investigator.cause_of(numerics[i], compiles[i]) for i in numerics}
        ((impl, (cause, evidence, extra)),) = [(i, f) for i, f in found.items() if f]
        # a first answer the client takes back: only the last submission is graded
        first = await client.call_tool(
            SUBMIT, {"cause": "none", "kernel": kernel, "experiment_ids": evidence}
        )
        assert not first.is_error
        final = {"cause": cause, "kernel": kernel, "impl": impl, "experiment_ids": evidence}
        last = await client.call_tool(SUBMIT, {**final, **extra})
        assert not last.is_error and last.structured_content["unknown_experiment_ids"] == []

    graded = runner.invoke(app, ["eval", "grade", str(folder), "--client", "mcp sdk"])
    assert graded.exit_code == 0, graded.output
    assert graded.stdout.strip() == str(folder / "results.json")
    assert f"{TASK} run 0: correct" in graded.stderr
    results = json.loads((folder / "results.json").read_text())
    (run,) = results["runs"]
    assert run["grade"]["correct"], run["grade"]["notes"]
    assert run["submission"]["cause"] == task.truth.cause.value == "tail_mask"
    assert run["submission"]["impl"] == task.truth.location.impl
    assert run["submission"]["number"] == task.truth.number
    assert [c["experiment_id"] for c in run["grade"]["citations"]] == evidence
    # counted against the ledger, read here with sqlite3: 4 checks and compiles, 2 submissions
    rows = ledger_rows(folder)
    assert run["tool_calls"] == len(rows) == 6
    assert [r["tool"] for r in rows][-2:] == [SUBMIT, SUBMIT]
    span = max(r["ended_at"] for r in rows) - min(r["started_at"] for r in rows)
    assert run["wall_s"] == pytest.approx(span, abs=1e-3)
    assert run["tokens"] is None and run["model_turns"] is None and run["folder"] == "."
    assert results["model"] == "mcp sdk" and results["overall"]["correct"] == 1.0

    # the graded session renders as eval pages; its path comes from the ledger (no transcript)
    shown = runner.invoke(app, ["eval", "report", str(folder)])
    assert shown.exit_code == 0, shown.output
    assert "1 task run(s), 6 experiment(s)" in shown.stdout
    page = (folder / "report" / "runs" / f"run0-{TASK}.html").read_text()
    assert page.count('<tr class="call"') == 6 and "from the ledger" in page
    for row in rows:  # every call links to its experiment's page in the session's ledger
        href = f"../ledgers/run0/{TASK}/experiments/{row['id']}.html"
        assert href in page and (folder / "report" / href[3:]).is_file()


def test_grading_a_folder_that_was_not_prepared_says_what_to_do(tmp_path):
    result = runner.invoke(app, ["eval", "grade", str(tmp_path)])
    assert result.exit_code == 2
    assert "no eval-session.json" in result.stderr and "eval prepare" in result.stderr
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep me")
    refused = runner.invoke(app, ["eval", "prepare", "--task", TASK, str(taken)])
    assert refused.exit_code == 2 and "not empty" in refused.stderr
    unknown = runner.invoke(app, ["eval", "prepare", "--task", "kernel.nope", str(tmp_path / "n")])
    assert unknown.exit_code == 2 and "unknown task(s) kernel.nope" in unknown.stderr


def test_the_eval_group_still_needs_a_model_to_run(tmp_path):
    bare = runner.invoke(app, ["eval"])
    assert bare.exit_code == 2 and "give --base-url and --model" in bare.stderr
    mixed = runner.invoke(app, ["eval", "--model", "m", "grade", str(tmp_path)])
    assert mixed.exit_code == 2 and "takes its own options" in mixed.stderr
