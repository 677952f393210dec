"""Issue 38, item 4: an eval's results as pages of the morning report (`infra-agent eval
report`), read in a real browser (Debian's chromium, as tests/server/test_report.py does).

The results come from real eval runs of the scripted policies (tests/server/eval_policies.py
behind tests/scripted_model.py, the tools really running): the always-finds-something policy
on a planted tail bug (right) and a control (wrong, with the grade's notes), and the guesser
repeated twice (the spread over runs). What a page shows is checked against results.json's
task runs, each task's transcript and its ledger read here with sqlite3, not through the
pages' own code."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from urllib.parse import urljoin, urlparse
from urllib.request import url2pathname

import anyio
import pytest
from eval_policies import AlwaysFinds, Guesser
from scripted_model import ScriptedModel
from test_report import launched_chromium, tab
from typer.testing import CliRunner

from infra_agent.server.cli import app
from infra_agent.server.eval.runner import (
    EvalConfig,
    collect,
    read_results,
    run_eval,
    write_results,
)

BUG, CONTROL = "kernel.tail_mask", "kernel.control_elementwise"
runner = CliRunner()


def _eval(policy, out: Path, tasks: list[str], runs: int = 1) -> Path:
    model = ScriptedModel([policy])
    try:
        config = EvalConfig(
            base_url=model.url,
            model=type(policy).__name__,
            out_dir=out,
            seed=0,
            tasks=tasks,
            runs=runs,
            budget_calls=12,
            budget_s=600,
        )
        anyio.run(run_eval, config)
    finally:
        model.close()
    return out


@pytest.fixture(scope="module")
def finds(tmp_path_factory) -> Path:
    """Always-finds-something on a planted bug and a control: one right, one wrong (~1 min)."""
    return _eval(AlwaysFinds(), tmp_path_factory.mktemp("finds"), [BUG, CONTROL])


@pytest.fixture(scope="module")
def guesses(tmp_path_factory) -> Path:
    """The guesser, twice over the same two tasks: no tool runs, so it is quick."""
    return _eval(Guesser(), tmp_path_factory.mktemp("guesses"), [BUG, CONTROL], runs=2)


@pytest.fixture(scope="module")
def starved_guess(tmp_path_factory) -> Path:
    """The guesser on the starved-client task: the runner plants its busy neighbour for the
    run, whose load generators (none: the guesser runs no benchmark) the page reports."""
    return _eval(Guesser(), tmp_path_factory.mktemp("starved"), ["serving.starved_client"])


@pytest.fixture(scope="module")
def browser(finds, guesses, starved_guess):  # after the evals: they run their own event loops
    yield from launched_chromium()


def report(results: Path) -> Path:
    shown = runner.invoke(app, ["eval", "report", str(results)])
    assert shown.exit_code == 0, shown.output
    site = results / "report"
    assert (site / "index.html").resolve().as_uri() in shown.stdout
    return site


def pct(runs: list[dict]) -> str:
    return f"{100 * sum(r['grade']['correct'] for r in runs) / len(runs):.0f}%"


def ledger(results: Path, task: str, run: int = 0) -> dict[str, sqlite3.Row]:
    db = results / f"run{run}" / task / "workspace" / ".infra-agent" / "ledger.sqlite"
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return {r["id"]: r for r in conn.execute("SELECT * FROM experiments ORDER BY seq")}
    finally:
        conn.close()


def links_resolve(page) -> int:
    """Every link on the page names a file of the site; returns how many were checked."""
    hrefs = page.eval_on_selector_all("a[href]", "as => as.map(a => a.getAttribute('href'))")
    for href in hrefs:
        target = Path(url2pathname(urlparse(urljoin(page.url, href)).path))
        assert target.is_file(), (page.url, href)
    return len(hrefs)


def test_the_overview_and_a_wrong_control_with_its_notes_and_evidence(browser, finds):
    results = json.loads((finds / "results.json").read_text())
    runs = {r["task_id"]: r for r in results["runs"]}
    assert runs[BUG]["grade"]["correct"] and not runs[CONTROL]["grade"]["correct"]
    site = report(finds)
    with tab(browser, site) as page:
        page.goto((site / "index.html").as_uri())
        assert page.locator("#card-correct b").inner_text() == pct(results["runs"]) == "50%"
        for task, run in runs.items():
            row = page.locator(f"#tasks tr[data-task='{task}']")
            assert row.locator("td.correct").inner_text() == pct([run])
            assert row.locator("td.calls").inner_text() == str(run["tool_calls"])
            assert row.locator("td.tokens").inner_text() == str(run["tokens"])
        notes = page.locator(f"#runs tr[data-task='{CONTROL}'] td.notes").inner_text()
        assert runs[CONTROL]["grade"]["notes"][0] in notes
        kernel_row = page.locator("#categories tr[data-category='kernel']")
        assert kernel_row.locator("td.runs").inner_text() == "2"
        assert links_resolve(page) == 2 + 2  # each task's run, in the task table and the list

        page.click(f"#tasks tr[data-task='{CONTROL}'] td.runs a")
        assert page.url.endswith(f"/runs/run0-{CONTROL}.html")
        assert page.locator("#result").inner_text() == "wrong"
        assert page.locator("#crit-identified").inner_text() == "no"
        assert page.locator("#notes li").all_inner_texts() == runs[CONTROL]["grade"]["notes"]
        assert "none" in page.locator("#row-cause td.truth").inner_text()
        cited = runs[CONTROL]["grade"]["citations"]
        rows = page.locator("#evidence tbody tr")
        assert rows.count() == len(cited) >= 2
        for i, c in enumerate(cited):
            assert rows.nth(i).locator("td.exists").inner_text() == ("yes" if c["exists"] else "no")
            assert rows.nth(i).locator("td.supports").inner_text() == (
                "yes" if c["supports"] else "no"
            )
            assert rows.nth(i).locator("td.why").inner_text() == c["why"]
        # the path: each tool call the transcript records, its verdict as the ledger holds it
        events = [
            json.loads(line)
            for line in (finds / "run0" / CONTROL / "transcript.jsonl").read_text().splitlines()
        ]
        calls = [e for e in events if e["event"] == "tool_call"]
        steps = page.locator("#path tr.call")
        assert steps.count() == len(calls) == runs[CONTROL]["tool_calls"] == 5
        rows_by_id = ledger(finds, CONTROL)
        for i, call in enumerate(calls):
            step = steps.nth(i)
            assert step.get_attribute("data-tool") == call["name"]
            assert step.get_attribute("data-experiment") == call["experiment_id"]
            result = json.loads(rows_by_id[call["experiment_id"]]["result"])
            if call["name"] == "check_numerics":
                assert step.locator("td.verdict").inner_text() == result["verdict"] == "pass"
        assert links_resolve(page) >= 1 + 1 + len(cited) + len(calls)

        first = cited[0]["experiment_id"]
        page.click(f"#evidence tr[data-experiment='{first}'] a")
        assert page.url.endswith(f"/ledgers/run0/{CONTROL}/experiments/{first}.html")
        assert first in page.locator("h1").inner_text()
        assert page.locator("#status").inner_text() == rows_by_id[first]["status"] == "ok"
        page.click("text=← report index")  # the task run's ledger as a morning report
        assert page.locator("tr.exp").count() == len(rows_by_id)


def test_a_right_answer_says_so(browser, finds):
    results = json.loads((finds / "results.json").read_text())
    (run,) = [r for r in results["runs"] if r["task_id"] == BUG]
    site = report(finds)
    with tab(browser, site) as page:
        page.goto((site / "runs" / f"run0-{BUG}.html").as_uri())
        assert page.locator("#result").inner_text() == "correct"
        assert page.locator("#notes").inner_text() == "Every criterion that applies holds."
        assert page.locator("#row-cause td.submitted").inner_text() == "tail_mask"
        number = page.locator("#row-number td.submitted").inner_text()
        assert float(number) == run["submission"]["number"]
        assert page.locator("#tokens").inner_text() == str(run["tokens"])
        assert page.locator("#crit-number").inner_text() == "yes"


def test_what_the_runner_planted_beside_the_agent_is_on_the_run_page(
    browser, starved_guess, guesses
):
    (run,) = json.loads((starved_guess / "results.json").read_text())["runs"]
    assert run["planted"].startswith("a busy neighbour on CPU ")
    assert "starved 0 load-generator process(es)" in run["planted"]  # it ran no benchmark
    site = report(starved_guess)
    with tab(browser, site) as page:
        page.goto((site / "runs" / "run0-serving.starved_client.html").as_uri())
        assert run["planted"] in page.locator("#planted").inner_text()
    site = report(guesses)  # a task with nothing planted has no such line
    with tab(browser, site) as page:
        page.goto((site / "runs" / f"run0-{BUG}.html").as_uri())
        assert page.locator("#planted").count() == 0


def test_the_spread_over_runs_and_a_guess_without_evidence(browser, guesses):
    results = json.loads((guesses / "results.json").read_text())
    assert len(results["runs"]) == 4
    site = report(guesses)
    per_run = [pct([r for r in results["runs"] if r["run"] == i]) for i in (0, 1)]
    with tab(browser, site) as page:
        page.goto((site / "index.html").as_uri())
        spread = page.locator("#card-spread b").inner_text()
        assert spread.endswith(f"over 2 runs ({per_run[0]}, {per_run[1]})"), spread
        assert page.locator("#categories td.runs").inner_text() == "4"
        assert page.locator("#runs tbody tr").count() == 4
        links_resolve(page)
        page.click(f"#tasks tr[data-task='{BUG}'] td.runs a >> nth=1")
        assert page.url.endswith(f"/runs/run1-{BUG}.html")
        assert "cites no experiment" in page.locator("#evidence").inner_text()
        assert page.locator("#path tr.call").count() == 1  # the submission, nothing looked at
        assert page.locator("#path tr.call td.verdict").inner_text() == "submitted"
        assert "model: guessed" in page.locator("#path tr.said").inner_text()
        links_resolve(page)


def test_a_void_run_is_marked_and_left_out_of_the_scores(browser, guesses, tmp_path):
    """The guesser's four runs, one of them marked as having measured the host (the runner does
    so from the run's own benchmarks: test_eval_tasks.py): its page says why, the tables mark it,
    and the scores shown are those of the other three, counted here from results.json."""
    copy = tmp_path / "guesses"
    shutil.copytree(guesses, copy, ignore=shutil.ignore_patterns("report"))
    results = read_results(copy)
    void = results.runs[1]
    void.host_measured = "b1: client_starved: the load generator waited 205 ms for a CPU"
    rescored = collect(
        **results.model_dump(exclude={"tasks", "runs", "per_task", "per_category", "overall"}),
        tasks=results.tasks,
        runs=results.runs,
    )
    write_results(rescored, copy)
    scored = json.loads((copy / "results.json").read_text())["runs"]
    kept = [r for r in scored if not r["host_measured"]]
    assert len(kept) == 3
    site = report(copy)
    with tab(browser, site) as page:
        page.goto((site / "index.html").as_uri())
        assert page.locator("#card-correct b").inner_text() == pct(kept)
        assert "3 task run(s) scored, 1 void" in page.locator("#setup").inner_text()
        assert page.locator("#categories td.runs").inner_text() == "3"
        row = page.locator(f"#runs tr[data-run='{void.run}'][data-task='{void.task_id}']")
        assert "void: measured the host" in row.locator("td.grade").inner_text()
        page.goto((site / "runs" / f"run{void.run}-{void.task_id}.html").as_uri())
        assert void.host_measured in page.locator("#void").inner_text()
        links_resolve(page)
