"""The morning report (`infra-agent report`) over a real night's ledger: real tool calls
(report_ledger.py), the site written by the command line, and read back in a real browser
(Debian's chromium driven by playwright; skipped with the reason when either is missing).
The numbers a page shows are checked against the ledger read here with sqlite3, not
through the report's own model."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from pathlib import Path

import pytest
from report_ledger import Night, make_night
from typer.testing import CliRunner

from infra_agent.server.cli import app
from infra_agent.server.report import Filters, build_report

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> Night:
    """One night for the module: five real calls (~15 s), shared by every test here."""
    return make_night(tmp_path_factory.mktemp("night"))


def ledger_result(night: Night, experiment_id: str) -> dict:
    """The row's result as the ledger holds it, read without the report's code."""
    conn = sqlite3.connect(night.state_dir / "ledger.sqlite")
    try:
        (text,) = conn.execute(
            "SELECT result FROM experiments WHERE id = ?", (experiment_id,)
        ).fetchone()
    finally:
        conn.close()
    return json.loads(text)


def numbers_in(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)]


def close_to(shown: float, value: float) -> bool:
    """The page prints 4 significant digits."""
    return math.isclose(shown, value, rel_tol=1e-3)


def test_the_command_writes_a_site_with_a_page_per_experiment(night: Night, tmp_path: Path):
    site = tmp_path / "site"
    result = runner.invoke(app, ["report", "-w", str(night.workspace), "--out", str(site)])
    assert result.exit_code == 0, result.output
    assert "5 experiment(s), 1 index page(s)" in result.output
    assert (site / "index.html").as_uri() in result.output
    index = (site / "index.html").read_text()
    for experiment_id in night[2:]:
        assert (site / "experiments" / f"{experiment_id}.html").is_file()
        assert f'href="./experiments/{experiment_id}.html"' in index
    # the failing check's plot is a file of the site, so the page opens from disk anywhere
    assert (site / "artifacts" / night.numerics_fail / "error_histogram.png").is_file()
    assert not re.search(r"""(src|href)="(https?:)?//""", index)  # nothing from elsewhere

    # a second run replaces its own report; a folder that holds something else is left alone
    again = runner.invoke(app, ["report", "-w", str(night.workspace), "--out", str(site)])
    assert again.exit_code == 0, again.output
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep me")
    refused = runner.invoke(app, ["report", "-w", str(night.workspace), "--out", str(other)])
    assert refused.exit_code == 2 and "not empty" in refused.output
    assert (other / "mine.txt").read_text() == "keep me"


def test_the_window_and_kernel_filter_the_experiments(night: Night, tmp_path: Path):
    kernel = runner.invoke(
        app,
        ["report", "-w", str(night.workspace), "--kernel", "rmsnorm", "--out", str(tmp_path / "k")],
    )
    assert kernel.exit_code == 0 and "0 experiment(s)" in kernel.output
    assert "No experiments in kernel rmsnorm" in (tmp_path / "k" / "index.html").read_text()
    bad = runner.invoke(app, ["report", "-w", str(night.workspace), "--since", "yesterday"])
    assert bad.exit_code == 2 and "neither an ISO-8601 time nor an age" in bad.output
    # the window is [since, until): until before the first call leaves none
    future = runner.invoke(
        app,
        [
            "report",
            "-w",
            str(night.workspace),
            "--until",
            "2000-01-01",
            "--out",
            str(tmp_path / "u"),
        ],
    )
    assert future.exit_code == 0 and "0 experiment(s)" in future.output


def test_an_empty_workspace_says_how_to_start(tmp_path: Path):
    written = build_report(tmp_path / "state", tmp_path / "site", Filters())
    assert (written.num_experiments, written.num_index_pages) == (0, 1)
    html = written.index.read_text()
    assert "No experiments yet" in html and "infra-agent call check_numerics" in html
    assert not (tmp_path / "state" / "ledger.sqlite").exists()  # a report never makes a ledger
