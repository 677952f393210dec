"""An eval's results as pages of the morning report (`infra-agent eval report RESULTS_DIR`):
an overview of the scores, one page per task run, and each task run's own ledger as a
morning report beside them, so a cited experiment links to its page.

    site/index.html                          scores per task, per category, overall (+ spread)
    site/runs/run<i>-<task>.html             the question, the path through the tools, the
                                             cited evidence, the grade and why
    site/ledgers/run<i>/<task>/...           that task run's ledger: the morning report's site

The path through the tools comes from the run's transcript.jsonl where there is one (the
runner's agent: the model's words between calls, and calls the budget refused), else from
its ledger (an MCP client's session). Each call's verdict is read off its ledger row, as the
morning report reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..eval.grade import Citation
from ..eval.runner import EvalResults, Score, TaskRun, read_results, run_folder, task_state_dir
from ..eval.tasks import EvalTask
from .model import Filters, Report, load_report
from .render import environment, experiment_href, prepare_site, write_site
from .rows import Experiment

ARG_CHARS = 48  # each argument's value, in the path's "arguments in short"
ARGS_CHARS = 200  # all of a call's arguments
TEXT_CHARS = 400  # the model's words between calls; a call's one-line answer


@dataclass(frozen=True)
class Step:
    """One entry of a task run's path: a tool call, or what the model said."""

    number: int  # 1-based, in the order they happened
    kind: str  # "call" or "said"
    tool: str = ""
    arguments: str = ""  # in short: key=value, each value clipped
    status: str = ""  # ok, error, not_run (refused before running), cancelled
    verdict: str = ""  # pass/fail, supported/contradicted..., error, submitted, not run
    answer: str = ""  # the call's one-line answer, or the model's words
    experiment_id: str | None = None
    href: str | None = None  # that experiment's page, from the site's root


@dataclass(frozen=True)
class CitedEvidence:
    citation: Citation
    tool: str | None  # what the cited experiment was, where the ledger has it
    href: str | None


@dataclass(frozen=True)
class RunPage:
    run: TaskRun
    task: EvalTask
    href: str  # from the site's root
    ledger_href: str | None  # the task run's ledger report, None when its ledger is gone
    steps: list[Step]
    path_source: str  # "transcript" or "ledger"
    evidence: list[CitedEvidence]
    folder: Path


@dataclass(frozen=True)
class EvalWritten:
    index: Path
    num_runs: int
    num_experiments: int


def run_href(run: TaskRun) -> str:
    return f"runs/run{run.run}-{run.task_id}.html"


def ledger_root(run: TaskRun) -> str:
    return f"ledgers/run{run.run}/{run.task_id}"


def write_eval_site(results_dir: Path, site: Path) -> EvalWritten:
    """Read `results_dir`/results.json and the task runs' folders; write the site into `site`
    (replacing an earlier report there). ValueError when there are no results."""
    results = read_results(results_dir)
    prepare_site(site)
    tasks = {t.id: t for t in results.tasks}
    pages, num_experiments = [], 0
    for run in results.runs:
        folder = run_folder(results_dir, run)
        report = _ledger_report(folder)
        ledger_href = None
        if report is not None:
            write_site(report, site / ledger_root(run))
            ledger_href = f"{ledger_root(run)}/index.html"
            num_experiments += len(report.experiments)
        steps, source = run_path(run, folder, report)
        pages.append(
            RunPage(
                run=run,
                task=tasks[run.task_id],
                href=run_href(run),
                ledger_href=ledger_href,
                steps=steps,
                path_source=source,
                evidence=[_cited(c, run, report) for c in run.grade.citations],
                folder=folder,
            )
        )
    env = environment()
    env.filters["pct"] = pct
    (site / "runs").mkdir()
    for page in pages:
        html = env.get_template("eval_run.html").render(
            results=results, page=page, root="..", refresh_s=None
        )
        (site / page.href).write_text(html, encoding="utf-8")
    index = env.get_template("eval_index.html").render(
        results=results,
        pages=pages,
        by_task={t: [p for p in pages if p.run.task_id == t] for t in tasks},
        results_dir=results_dir.resolve(),
        spread=spread,
        root=".",
        refresh_s=None,
    )
    (site / "index.html").write_text(index, encoding="utf-8")
    return EvalWritten(site / "index.html", len(pages), num_experiments)


def _ledger_report(folder: Path) -> Report | None:
    """The task run's ledger as the morning report reads it; None when it is gone (a folder
    deleted or moved: the run's page says so)."""
    state_dir = task_state_dir(folder)
    if not (state_dir / "ledger.sqlite").is_file():
        return None
    return load_report(state_dir, Filters())


def run_path(run: TaskRun, folder: Path, report: Report | None) -> tuple[list[Step], str]:
    """The run's steps, from its transcript if it has one, else from its ledger."""
    by_id = report.by_id if report is not None else {}
    transcript = folder / "transcript.jsonl"
    if transcript.is_file():
        return _from_transcript(transcript, run, by_id), "transcript"
    experiments = report.experiments if report is not None else []
    calls = [
        e
        for e in experiments
        if e.parent_id is None and (not run.agent_run_id or e.run_id == run.agent_run_id)
    ]
    steps = [
        _call_step(i, e.tool, e.arguments, e.status, e, by_id, run)
        for i, e in enumerate(calls, start=1)
    ]
    return steps, "ledger"


def _from_transcript(path: Path, run: TaskRun, by_id: dict[str, Experiment]) -> list[Step]:
    steps: list[Step] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a killed run's half-written last line
            continue
        if event.get("event") == "model_response":
            content = (event.get("message") or {}).get("content")
            text = content.strip() if isinstance(content, str) else ""
            if text:
                steps.append(Step(len(steps) + 1, "said", answer=clip(text, TEXT_CHARS)))
        elif event.get("event") == "tool_call":
            exp = by_id.get(event.get("experiment_id") or "")
            try:
                arguments = json.loads(event.get("arguments") or "{}")
            except json.JSONDecodeError:
                arguments = event.get("arguments")  # malformed: shown as sent
            status = event.get("status") or ""
            step = _call_step(
                len(steps) + 1, event.get("name", ""), arguments, status, exp, by_id, run
            )
            if exp is None:  # not run, or no ledger row: the transcript's answer
                step = Step(
                    step.number,
                    "call",
                    tool=step.tool,
                    arguments=step.arguments,
                    status=status,
                    verdict="not run" if status == "not_run" else status,
                    answer=clip(str(event.get("result") or ""), TEXT_CHARS),
                )
            steps.append(step)
    return steps


def _call_step(
    number: int,
    tool: str,
    arguments: object,
    status: str,
    exp: Experiment | None,
    by_id: dict[str, Experiment],
    run: TaskRun,
) -> Step:
    verdict, answer = status, ""
    if exp is not None:
        verdict, answer = verdict_of(exp), clip(exp.summary, TEXT_CHARS)
    return Step(
        number,
        "call",
        tool=tool,
        arguments=short_arguments(arguments),
        status=exp.status if exp is not None else status,
        verdict=verdict,
        answer=answer,
        experiment_id=exp.id if exp is not None else None,
        href=_experiment_link(exp.id, run) if exp is not None and exp.id in by_id else None,
    )


def verdict_of(exp: Experiment) -> str:
    """A call's answer in a word, as its ledger row gives it."""
    if exp.failed:
        return exp.status  # error, interrupted
    if exp.tool == "submit_diagnosis":
        return "submitted"
    if exp.verdict:
        return exp.verdict  # check_numerics: pass/fail; microbench: faster/slower/...
    if exp.answer not in ("not_judged", ""):
        return exp.answer  # a hypothesis' answer
    return exp.status


def short_arguments(arguments: object) -> str:
    if not isinstance(arguments, dict):
        return clip(str(arguments or ""), ARGS_CHARS)
    parts = []
    for key, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        parts.append(f"{key}={clip(text, ARG_CHARS)}")
    return clip(", ".join(parts), ARGS_CHARS)


def clip(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _cited(citation: Citation, run: TaskRun, report: Report | None) -> CitedEvidence:
    exp = report.by_id.get(citation.experiment_id) if report is not None else None
    return CitedEvidence(
        citation=citation,
        tool=exp.tool if exp is not None else None,
        href=_experiment_link(exp.id, run) if exp is not None else None,
    )


def _experiment_link(experiment_id: str, run: TaskRun) -> str:
    return f"{ledger_root(run)}/{experiment_href(experiment_id)}"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def spread(score: Score) -> str:
    """The fraction correct of each repeat, and their range when there are several."""
    per_run = score.correct_per_run
    if len(per_run) < 2:
        return ""
    return (
        f"{pct(min(per_run))}–{pct(max(per_run))} over {len(per_run)} runs ("
        + ", ".join(pct(v) for v in per_run)
        + ")"
    )


__all__ = ["EvalResults", "EvalWritten", "write_eval_site"]
