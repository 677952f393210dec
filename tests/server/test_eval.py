"""Issue 38: `infra-agent eval` drives the agent loop on each task, with scripted policies
behind the scripted chat-completions server (tests/scripted_model.py) and the tools really
running (sandbox, interpreter, ledger) in each task's own fresh workspace.

    guesser        submits without looking: near chance on the cause, never correct (no evidence)
    investigator   follows the tools' answers: right on planted bugs and controls alike, and on
                   the seed's three episodes (TF32 shards, a tile loop redoing the normalisation,
                   a KV transfer behind a held GIL)
    always-finds   the investigator that never answers "none": wrong on every control
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from eval_policies import AlwaysFinds, Guesser, Investigator
from scripted_model import ScriptedModel
from typer.testing import CliRunner

from infra_agent.server.cli import app
from infra_agent.server.eval.kernel_tasks import FAMILIES as KERNEL_FAMILIES
from infra_agent.server.eval.runner import EvalConfig, run_eval
from infra_agent.server.eval.submit import NAME as SUBMIT
from infra_agent.server.eval.tasks import families, generate_tasks
from infra_agent.server.ledger import read_only_rows


@pytest.fixture
def serve_policy():
    models: list[ScriptedModel] = []

    def start(policy):
        models.append(ScriptedModel([policy]))
        return models[-1]

    yield start
    for m in models:
        m.close()


def _eval(model: ScriptedModel, out: Path, tasks: list[str] | None, seed: int = 0):
    config = EvalConfig(
        base_url=model.url,
        model="scripted",
        out_dir=out,
        seed=seed,
        tasks=tasks,
        budget_calls=12,
        budget_s=600,
    )
    return anyio.run(run_eval, config)


HOST_FINDINGS = ("client_starved", "client_engine_gap")


def _measured_the_host(run, codes: tuple[str, ...] = HOST_FINDINGS) -> str | None:
    """Why a serving run measured the host, not its task: nothing was planted beside the client
    (no neighbour), yet a benchmark of the task said the client read the engine late, starved of
    its CPU or behind some other wait (client_starved, client_engine_gap). Beside two CPU hogs
    that happened in 3 of 6 tasks (e.g. the generator waiting 31% of a 60 ms run; a criterion
    inconclusive with the client's TTFT 20 ms above the engine's own), and the answers followed
    it. None for a task the host left alone, and for the starved-client task, whose neighbour is
    the plant."""
    if run.planted is not None:
        return None
    rows = read_only_rows(Path(run.folder) / "workspace" / ".infra-agent" / "ledger.sqlite")
    for row in rows:
        if row["tool"] == "serve_benchmark" and isinstance(row["result"], dict):
            said = [f for f in row["result"].get("findings") or [] if f.startswith(codes)]
            if said:
                return said[0][:200]
    return None


def test_the_guesser_scores_near_chance_through_the_command(serve_policy, tmp_path):
    model = serve_policy(Guesser())
    out = tmp_path / "results"
    result = CliRunner().invoke(
        app,
        ["eval", "--base-url", model.url, "--model", "guesser", "--seed", "0", "--out", str(out)],
        env={"OPENAI_API_KEY": ""},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out / "results.json")
    results = json.loads((out / "results.json").read_text())
    tasks = generate_tasks(0)
    assert results["seed"] == 0 and not results["seed_drawn"]
    assert [r["task_id"] for r in results["runs"]] == [t.id for t in tasks]
    # one cause of six drawn at random: about one in six right, and none graded correct,
    # for no guess cites an experiment that shows it
    overall = results["overall"]
    assert overall["identified"] <= 0.4 and overall["correct"] == 0 and overall["evidence_ok"] == 0
    assert all(r["tool_calls"] == 1 and r["stop_reason"] == "answered" for r in results["runs"])
    # the eval's server offers submit_diagnosis; every submission is on its task's own ledger
    first = model.requests[0]["body"]
    assert SUBMIT in {t["function"]["name"] for t in first["tools"]}
    assert "submit_diagnosis" in first["messages"][1]["content"]
    system = first["messages"][0]["content"]
    assert "The checks, cheapest first" in system and "You own the performance" not in system
    for run in results["runs"]:
        rows = read_only_rows(Path(run["folder"]) / "workspace" / ".infra-agent" / "ledger.sqlite")
        assert [(r["tool"], r["run_id"]) for r in rows] == [(SUBMIT, run["agent_run_id"])]
        assert rows[0]["arguments"]["cause"] == run["submission"]["cause"]
        assert (Path(run["folder"]) / "transcript.jsonl").is_file()


def test_an_unknown_task_is_refused_before_anything_runs(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--tasks",
            "kernel.nope",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 2 and "unknown task(s) kernel.nope" in result.stderr
    assert "kernel.stride" in result.stderr and not (tmp_path / "results.json").exists()


@pytest.mark.anyio
async def test_an_ordinary_session_has_no_submit_tool(client):
    assert SUBMIT not in {t.name for t in (await client.list_tools()).tools}


def _report(results) -> None:
    for r in results.runs:  # pytest -s: what docs/eval.md's table is made of
        print(r.task_id, "correct" if r.grade.correct else r.grade.notes, r.tool_calls, r.wall_s)


@pytest.mark.slow
def test_the_investigator_scores_at_least_90_percent_on_every_kernel_task(serve_policy, tmp_path):
    """One seed here (about half a minute a task on this host); docs/eval.md has a run of more."""
    model = serve_policy(Investigator())
    results = _eval(model, tmp_path, [f"kernel.{name}" for name in KERNEL_FAMILIES], seed=0)
    _report(results)
    wrong = {r.task_id: r.grade.notes for r in results.runs if not r.grade.correct}
    assert results.overall.correct >= 0.9, wrong
    assert results.per_category["kernel"].num_runs == len(KERNEL_FAMILIES)
    # the tail bug: the block size it is lost at, and the impl, read off the checks it cites
    by_id = {r.task_id: r for r in results.runs}
    bug, control = by_id["kernel.tail_mask"], by_id["kernel.control_elementwise"]
    (truth,) = [t.truth for t in results.tasks if t.id == "kernel.tail_mask"]
    assert bug.grade.correct and control.grade.correct, (bug.grade.notes, control.grade.notes)
    assert (
        bug.submission["number"] == truth.number and bug.submission["impl"] == truth.location.impl
    )
    assert all(c.exists and c.supports for c in bug.grade.citations[:1])
    assert (bug.tool_calls, control.tool_calls) == (5, 5)  # 2 checks, 2 compiles, 1 submission


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 5])
def test_the_investigator_finds_the_kernel_episodes_and_clears_their_controls(
    serve_policy, tmp_path, seed
):
    """TF32 shards (check_numerics' partition report), a V-tiled decode redoing the head's
    normalisation per tile (compile_kernel's executed work per output, against the other impl),
    and (seed 0) both episodes' controls. Seed 0: 4 ranks, BLOCK_V 32, the first impl planted
    in the decode kernel; seed 5: 2 ranks, BLOCK_V 16 (8 V tiles at V = 128), the second."""
    model = serve_policy(Investigator())
    kernel_episodes = [t for t in families() if t.startswith("episode.") and "gil" not in t]
    if seed:  # the planted two only: their controls, cleared at seed 0, differ only in numbers
        kernel_episodes = [t for t in kernel_episodes if ".control_" not in t]
    results = _eval(model, tmp_path, kernel_episodes, seed=seed)
    _report(results)
    assert [r.task_id for r in results.runs] == kernel_episodes
    for run in results.runs:
        assert run.grade.correct, (run.task_id, run.grade.notes, run.submission)
    by_id = {r.task_id: r for r in results.runs}
    (kda,) = [t for t in results.tasks if t.id == "episode.kda_recompute"]
    # the number read off the compile's loop equals the one the variant planted (V / BLOCK_V)
    assert by_id["episode.kda_recompute"].submission["number"] == kda.truth.number
    assert by_id["episode.kda_recompute"].tool_calls == 6  # 2 checks, 2 compiles, 1 against, submit
    assert by_id["episode.tp_partition"].tool_calls == 5


@pytest.mark.slow
@pytest.mark.serial  # an engine under load and a profile of its threads: other tests are noise
def test_the_investigator_finds_the_gil_held_behind_the_kv_transfer(serve_policy, tmp_path):
    """The deployment the question gives (its flags in a file: the native dispatch/combine
    keeps the GIL), launched and profiled under the question's load with the overlap it
    expects: profile's gil_contention names the prefill worker as the GIL's holder."""
    model = serve_policy(Investigator())
    results = _eval(model, tmp_path, ["episode.kv_gil"])
    _report(results)
    (run,) = results.runs
    if not run.grade.correct:
        rows = read_only_rows(Path(run.folder) / "workspace" / ".infra-agent" / "ledger.sqlite")
        prof = [r["result"] for r in rows if r["tool"] == "profile"][-1]
        if "overlap_undecided" in prof["finding_codes"]:
            # measured at host load 10-16 on 2 cores (3 of 4 runs): every window CPU-starved;
            # profile says so (before, it answered no finding at all and "none" followed)
            pytest.xfail(f"every profile window was CPU-starved: {prof['findings']}")
    assert run.grade.correct, (run.grade.notes, run.submission)
    # profile names an engine's threads "engine/prefill-worker"; the grade compares the last part
    assert run.submission["thread"].rsplit("/", 1)[-1] == "prefill-worker"
    assert run.tool_calls in (3, 4, 5)


@pytest.mark.slow
def test_always_finding_something_fails_every_control(serve_policy, tmp_path):
    """The kernel and episode controls only: on a planted bug this policy is the investigator
    (its tasks above); the serving control, which times two engines, runs alone below."""
    model = serve_policy(AlwaysFinds())
    controls = [
        t
        for t in families()
        if t.split(".", 1)[1].startswith("control_") and not t.startswith("serving.")
    ]
    results = _eval(model, tmp_path, controls)
    assert len(results.runs) == len(controls) >= 5, results.runs
    for run in results.runs:
        assert run.control and not run.grade.correct and not run.grade.identified, run.task_id
    elementwise = next(r for r in results.runs if r.task_id == "kernel.control_elementwise")
    assert not elementwise.grade.evidence_ok  # its cited checks pass: they show no bug


@pytest.mark.slow
@pytest.mark.serial  # two engines timed against each other: alone on the host
def test_the_investigator_finds_each_planted_serving_problem_and_clears_the_control(
    serve_policy, tmp_path
):
    """Yesterday's and today's config launched, today's benchmarked against yesterday's with the
    user's traffic (baseline_handle=, alternating repeats): the investigator submits what the
    criterion's verdict, the attribution's phase and the prefix-cache hit rates say, and where
    today's config switched a hot op's kernel impl, what a microbench of the two impls says;
    beside the runner's busy neighbour (the starved client), what the benchmark's own
    client_starved check says, while the control, on the same host without it, has none."""
    model = serve_policy(Investigator())
    serving = [t for t in generate_tasks(0) if t.category == "serving"]
    results = _eval(model, tmp_path, [t.id for t in serving])
    for run in results.runs:
        print(
            run.task_id, run.grade.correct, run.tool_calls, f"{run.wall_s:.0f} s", run.grade.notes
        )
    # a run whose benchmark said its load generator starved is void, right or wrong: the
    # runner's verdict, checked against this test's own read of each run's ledger file
    assert {r.task_id: bool(r.host_measured) for r in results.runs} == {
        r.task_id: bool(_measured_the_host(r, ("client_starved",))) for r in results.runs
    }
    scored = results.per_category["serving"]
    void = sum(bool(r.host_measured) for r in results.runs)
    assert (scored.num_runs, scored.void_runs) == (len(serving) - void, void)
    assert len(serving) >= 4
    # a wrong answer on a benchmark that named the host as what it measured is the host's (this
    # test also forgives client_engine_gap: beside two hogs a criterion went inconclusive with the
    # client's TTFT 20 ms above the engine's own, and the answer followed it)
    voided = {
        r.task_id: (r.grade.notes, why)
        for r in results.runs
        if not r.grade.correct and (why := r.host_measured or _measured_the_host(r))
    }
    wrong = {
        r.task_id: r.grade.notes
        for r in results.runs
        if not r.grade.correct and r.task_id not in voided
    }
    assert not wrong, wrong
    # 2 launches, 1 benchmark, 1 submission (and for the kernel switched, 1 microbench); every
    # cited experiment shows what the submission claims
    graded = [r for r in results.runs if r.task_id not in voided]
    assert [r.tool_calls for r in graded] == [
        5 if r.task_id == "serving.slow_kernel" else 4 for r in graded
    ]
    assert all(c.exists and c.supports for r in graded for c in r.grade.citations)
    if voided:  # every other task was graded above; these measured the host
        pytest.skip(f"the host, not the task, was measured in {sorted(voided)}: {voided}")


@pytest.mark.slow
@pytest.mark.serial  # two engines timed against each other: alone on the host
def test_always_finding_something_fails_the_serving_control(serve_policy, tmp_path):
    """The control's change cannot be felt: the benchmark shows no regression, so blaming the
    changed key is wrong, and the cited benchmark does not support it."""
    model = serve_policy(AlwaysFinds())
    (run,) = _eval(model, tmp_path, ["serving.control_config"]).runs
    assert run.control and run.submission["cause"] != "none"
    assert not run.grade.correct and not run.grade.identified
    # a benchmark that said the host starved the client supports a claim about the client: the
    # run is void (this test's own read of its ledger file agrees with the runner's)
    starved = _measured_the_host(run, ("client_starved",))
    assert bool(run.host_measured) == bool(starved), (run.host_measured, starved)
    if run.grade.evidence_ok and run.host_measured:
        pytest.skip(f"the host, not the control, was measured: {run.host_measured}")
    assert not run.grade.evidence_ok, run.grade.citations
