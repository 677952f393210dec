"""The report's sweep pages over a real sweep_kernel call (rmsnorm, two configs, one shape)
made through the MCP client: the sweep's page shows its winner and every config and links to
each trial's page, the index does not list the trials as rows, and `--sweep ID` limits the
site to that sweep. The numbers shown are checked against the ledger read with sqlite3."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import NamedTuple

import anyio
import pytest
from conftest import call, copy_zoo
from mcp import Client
from test_report import close_to, launched_chromium, numbers_in, runner, tab

from infra_agent.server.app import build_server
from infra_agent.server.cli import app
from infra_agent.server.report import Filters, build_report

CONFIGS = [{"BLOCK_N": 64}, {"BLOCK_N": 128}]


class SweepNight(NamedTuple):
    workspace: Path
    state_dir: Path
    sweep: str  # the sweep_kernel call's experiment id
    other: str  # a check_numerics call of its own, not part of the sweep


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> SweepNight:
    """A sweep (~10 s) and one call outside it."""
    return anyio.run(_calls, copy_zoo(tmp_path_factory.mktemp("sweep-night")))


async def _calls(workspace: Path) -> SweepNight:
    server = build_server(workspace)
    try:
        async with Client(server) as client:
            other = await call(
                client,
                "check_numerics",
                kernel="vector_add",
                shapes=[{"N": 300}],
                dtypes=["float32"],
                trials=1,
            )
            sweep = await call(
                client,
                "sweep_kernel",
                kernel="rmsnorm",
                configs=CONFIGS,
                shapes=[{"M": 4, "N": 64}],
                dtype="float32",
                target="sm_90a",
                round_ms=100,
            )
    finally:
        await server.aclose()
    state = workspace / ".infra-agent"
    return SweepNight(workspace, state, sweep["experiment_id"], other["experiment_id"])


def ledger(night: SweepNight, sql: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(night.state_dir / "ledger.sqlite")
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def trial_ids(night: SweepNight) -> list[str]:
    rows = ledger(night, "SELECT id FROM experiments WHERE parent_id = ? ORDER BY seq", night.sweep)
    return [r[0] for r in rows]


def sweep_result(night: SweepNight) -> dict:
    (text,) = ledger(night, "SELECT result FROM experiments WHERE id = ?", night.sweep)[0]
    return json.loads(text)


def write(night: SweepNight, site: Path, *flags: str) -> str:
    result = runner.invoke(app, ["report", "-w", str(night.workspace), "--out", str(site), *flags])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def site(night: SweepNight, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sweep-report") / "site"
    write(night, folder)
    return folder


# --- sweep_serve: the built-in engine on the tiny checkpoint ------------------------------
# First in the module: its calls run their own event loop, which they cannot while the
# browser's (playwright's) is open.


@pytest.fixture(scope="module")
def serve_night(tmp_path_factory) -> SweepNight:
    """A sweep_serve of two configs, one of which launch_serve refuses (dropped)."""
    from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

    workspace = copy_zoo(tmp_path_factory.mktemp("serve-night"))
    build_tiny_checkpoint(workspace / "tiny")
    return anyio.run(_serve_calls, workspace)


async def _serve_calls(workspace: Path) -> SweepNight:
    server = build_server(workspace)
    try:
        async with Client(server) as client:
            sweep = await call(
                client,
                "sweep_serve",
                base_args={"model": "tiny"},
                configs=[{"max_num_seqs": 0}, {"max_num_seqs": 4}],
                workload={"num_requests": 6, "input_len": 16, "output_len": 8, "seed": 5},
                ladder={"concurrencies": [1, 2]},
                slo={"ttft_p99_ms": 5000},
                repeats=1,
            )
    finally:
        await server.aclose()
    return SweepNight(workspace, workspace / ".infra-agent", sweep["experiment_id"], "")


@pytest.mark.slow
def test_a_serve_sweep_page_shows_the_best_the_front_and_what_was_dropped(
    serve_night: SweepNight, tmp_path: Path
):
    result = sweep_result(serve_night)
    write(serve_night, tmp_path / "site")
    html = (tmp_path / "site" / "experiments" / f"{serve_night.sweep}.html").read_text()
    best = html.split('id="sweep-best">')[1].split("</p>")[0]
    assert f"<code>{result['best']}</code>" in best
    assert close_to(numbers_in(best.split('class="num">')[1])[0], result["best_value"])
    assert len(result["front"]) >= 1
    front = html.split('id="sweep-front"')[1].split("</table>")[0]
    for point in result["front"]:
        assert f"experiments/{point['experiment_id']}.html" in front
    (dropped,) = result["dropped"]
    assert dropped["label"] in html.split('id="sweep-dropped"')[1].split("</ul>")[0]
    for trial in trial_ids(serve_night):
        assert f'href="../experiments/{trial}.html"' in html
        page = (tmp_path / "site" / "experiments" / f"{trial}.html").read_text()
        assert f'id="sweep-parent">trial of sweep <a href="../experiments/{serve_night.sweep}' in (
            page
        )
    index = (tmp_path / "site" / "index.html").read_text()
    assert index.count('class="exp"') == 1


# --- sweep_kernel in a real browser -------------------------------------------------------


@pytest.fixture(scope="module")
def browser(night: SweepNight):  # after the night: its calls run their own event loop first
    yield from launched_chromium()


def test_the_index_counts_trials_instead_of_listing_them(browser, night: SweepNight, site: Path):
    trials = trial_ids(night)
    assert len(trials) >= 3  # compile and numerics per config, then the race
    with tab(browser, site) as page:
        page.goto((site / "index.html").as_uri())
        shown = page.locator("tr.exp").evaluate_all("rows => rows.map(r => r.id)")
        top_level = ledger(night, "SELECT id FROM experiments WHERE parent_id IS NULL ORDER BY seq")
        assert (
            shown
            == [f"row-{r[0]}" for r in top_level]
            == [
                f"row-{night.other}",
                f"row-{night.sweep}",
            ]
        )
        assert f"({len(trials)} of them sweep trials" in page.locator("p.muted").first.inner_text()
        # the summary is over the rows too: a trial that failed mid-race is its sweep's story
        errors = ledger(
            night, "SELECT COUNT(*) FROM experiments WHERE status = 'error' AND parent_id IS NULL"
        )
        assert page.locator("#card-errors b").inner_text() == str(errors[0][0])
        count = page.locator(f"#row-{night.sweep} .trials").inner_text()
        assert count == f"{len(trials)} trials"
        # the filters still work over the rows that are there
        page.select_option("select[data-facet=tool]", "sweep_kernel")
        assert page.locator("tr.exp:visible").count() == 1
        assert page.locator("#shown").inner_text() == "1 of 2 rows shown"


def test_the_sweep_page_shows_winner_configs_and_trials(browser, night: SweepNight, site: Path):
    result = sweep_result(night)
    trials = trial_ids(night)
    with tab(browser, site) as page:
        page.goto((site / "index.html").as_uri())
        page.click(f"#row-{night.sweep} a")
        assert page.url.endswith(f"/experiments/{night.sweep}.html")
        (shape,) = result["shapes"]
        winner = page.locator("#sweep-winners td.winner").inner_text()
        assert winner == json.dumps(shape["winner"], sort_keys=True)
        (median,) = numbers_in(page.locator("#sweep-winners td.median").inner_text())
        assert close_to(median, shape["winner_median_ms"])
        rows = page.locator("#sweep-configs tr.config")
        assert rows.count() == len(CONFIGS) == len(result["configs"])
        for i, config in enumerate(result["configs"]):
            row = rows.nth(i)
            assert row.locator("td").first.inner_text() == json.dumps(
                config["config"], sort_keys=True
            )
            assert row.locator("td").nth(1).inner_text() == config["stage"]
            for ms, value in zip(
                row.locator(".median").all_inner_texts(), config["median_ms"].values()
            ):
                assert close_to(float(ms), value)
        assert page.locator("#sweep-plot").evaluate("img => img.naturalWidth") > 0
        links = page.locator("#sweep-trials a").all_inner_texts()
        assert links == trials
        for trial in trials:  # each opens the trial's page, which names its sweep
            page.click(f"#sweep-trials a:text-is('{trial}')")
            assert page.url.endswith(f"/experiments/{trial}.html")
            back = page.locator("#sweep-parent").inner_text()
            assert back.startswith(f"trial of sweep {night.sweep}")
            page.go_back()


def test_the_sweep_flag_limits_the_site(night: SweepNight, tmp_path: Path):
    output = write(night, tmp_path / "site", "--sweep", night.sweep)
    trials = trial_ids(night)
    assert f"{len(trials) + 1} experiment(s)" in output
    pages = {p.stem for p in (tmp_path / "site" / "experiments").glob("*.html")}
    assert pages == {night.sweep, *trials} and night.other not in pages
    index = (tmp_path / "site" / "index.html").read_text()
    assert f"sweep {night.sweep} and its trials" in index
    write(night, tmp_path / "none", "--sweep", "e99999-0000")
    assert (
        "check the id given to <code>--sweep</code>"
        in (tmp_path / "none" / "index.html").read_text()
    )
    help_text = runner.invoke(app, ["report", "--help"]).output
    assert "--sweep" in help_text


def test_the_sweeps_row_shows_its_winner(browser, night, tmp_path):
    result = sweep_result(night)
    build_report(night.state_dir, tmp_path / "site", Filters())
    with tab(browser, tmp_path / "site") as page:
        page.goto((tmp_path / "site" / "index.html").as_uri())
        key = page.locator(f"#row-{night.sweep} td.key").inner_text()
        config = ", ".join(f"{k}={v}" for k, v in result["best"].items())
        assert f"winner {config}" in key, key
        assert close_to(numbers_in(key)[0], result["best_geomean_ms"]), (key, result)
