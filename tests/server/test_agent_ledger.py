"""The ledger's link from an experiment to the agent run that asked for it: the run named
in a request's `_meta`, stored per row, filtered by list_experiments and `experiments --run`;
an older ledger gains the columns on open."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import call
from typer.testing import CliRunner

from infra_agent.server.cli import app
from infra_agent.server.context import RUN_META_KEY
from infra_agent.server.ledger import Ledger

pytestmark = pytest.mark.anyio


async def test_run_named_in_meta_is_recorded_and_filterable(client, server):
    linked = await client.call_tool(
        "describe_kernel",
        {"kernel": "vector_add", "include_source": False},
        meta={RUN_META_KEY: {"run_id": "run-a", "step": 3, "model": "glm-test"}},
    )
    other = await client.call_tool(
        "list_kernels", {}, meta={RUN_META_KEY: {"run_id": "run-b", "step": 1}}
    )
    plain = await call(client, "list_kernels")
    # Metadata is not trusted: a run id that is not a plain token, or a bool step, is dropped.
    odd = await client.call_tool(
        "list_kernels", {}, meta={RUN_META_KEY: {"run_id": "../x y", "step": 1}}
    )
    boolean = await client.call_tool(
        "list_kernels", {}, meta={RUN_META_KEY: {"run_id": "run-c", "step": True}}
    )

    row = server.state.ledger.get(linked.structured_content["experiment_id"])
    assert (row["run_id"], row["run_step"], row["run_model"]) == ("run-a", 3, "glm-test")
    assert server.state.ledger.get(other.structured_content["experiment_id"])["run_model"] is None
    for unlinked in (plain, odd.structured_content):
        assert server.state.ledger.get(unlinked["experiment_id"])["run_id"] is None
    assert server.state.ledger.get(boolean.structured_content["experiment_id"])["run_step"] is None

    listed = await call(client, "list_experiments", run="run-a")
    assert [(e["id"], e["run_step"], e["run_model"]) for e in listed["experiments"]] == [
        (linked.structured_content["experiment_id"], 3, "glm-test")
    ]
    assert "run=run-a" in listed["summary"]


def test_cli_experiments_filters_by_run(workspace):
    runner = CliRunner(env={"COLUMNS": "200"})
    ledger = Ledger(workspace / ".infra-agent" / "ledger.sqlite")
    for run_id in ("run-x", "run-y", None):
        link = {"run_id": run_id, "step": 1, "model": "m"} if run_id else None
        ledger.open(
            tool="list_kernels",
            arguments={},
            kernel=None,
            hypothesis=None,
            git_commit=None,
            git_diff_sha256=None,
            device=None,
            device_fingerprint=None,
            run=link,
        )
    ledger.close()
    result = runner.invoke(app, ["experiments", "--run", "run-y", "--json", "-w", str(workspace)])
    assert result.exit_code == 0, result.output
    assert [r["run_id"] for r in json.loads(result.stdout)] == ["run-y"]


def test_a_ledger_from_before_runs_gains_the_columns(tmp_path):
    path = tmp_path / "ledger.sqlite"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE experiments (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, tool TEXT NOT NULL, "
        "kernel TEXT, hypothesis TEXT, arguments TEXT NOT NULL, git_commit TEXT, git_diff_sha256 TEXT, "
        "device_fingerprint TEXT, device TEXT, pid INTEGER, started_at REAL NOT NULL, ended_at REAL, "
        "duration_s REAL, status TEXT NOT NULL, result TEXT, error TEXT, artifacts TEXT NOT NULL DEFAULT '[]')"
    )
    old.execute(
        "INSERT INTO experiments (id, tool, arguments, started_at, status) VALUES ('e1', 't', '{}', 1.0, 'ok')"
    )
    old.commit()
    old.close()
    ledger = Ledger(path)
    assert ledger.get("e1")["run_id"] is None
    new_id = ledger.open(
        tool="t",
        arguments={},
        kernel=None,
        hypothesis=None,
        git_commit=None,
        git_diff_sha256=None,
        device=None,
        device_fingerprint=None,
        run={"run_id": "r9", "step": 2, "model": "m"},
    )
    assert [r["id"] for r in ledger.query(run_id="r9")] == [new_id]
    assert ledger.integrity_ok()
    ledger.close()
