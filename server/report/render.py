"""The report as a static site: index pages (summary, then the timeline in chains, paginated)
and one page per experiment, from the Jinja2 templates next to this file. Styles and the
small filter script are inline, images and downloads are files of the site: it opens from
disk, makes no request beyond its own folder, and can be zipped and attached anywhere.

    site/index.html, index-2.html, ...     the summary and the timeline
    site/experiments/<id>.html              one page per experiment
    site/artifacts/<id>/<name>              the files those pages show or offer
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .model import Chain, ChainRow, Report
from .numbers import fmt
from .pages import DiffCache, experiment_page
from .rows import Experiment

PAGE_ROWS = 200  # timeline rows per index page: a 10,000-row night stays quick to open
MARKER = ".infra-agent-report"  # a folder holding it is a report this command may replace
SUMMARY_ITEMS = 25  # entries shown per summary list; the count says how many there are
TEMPLATES = Path(__file__).parent / "templates"


class ReportError(Exception):
    """The report cannot be written where asked; the message says what to do."""


@dataclass(frozen=True)
class IndexPage:
    number: int  # 1-based
    chains: list[tuple[Chain, list[ChainRow]]]  # rows of each chain on this page
    num_rows: int

    @property
    def filename(self) -> str:
        return page_filename(self.number)


@dataclass(frozen=True)
class Written:
    index: Path
    num_experiments: int
    num_index_pages: int


def page_filename(number: int) -> str:
    return "index.html" if number == 1 else f"index-{number}.html"


def experiment_href(experiment_id: str) -> str:
    return f"experiments/{experiment_id}.html"


class Renderer:
    """The HTML of one report's pages, for the static site and the live /ui alike (the same
    relative links: index pages at the root, experiments/ and artifacts/ below it)."""

    def __init__(self, report: Report, refresh_s: int | None = None):
        """`refresh_s`: index pages reload themselves this often (the live /ui)."""
        self.report = report
        self.refresh_s = refresh_s
        self.pages = paginate(report.chains)
        self._env = environment()
        self._facets = facets(report)
        self._diffs: DiffCache = {}

    def index(self, number: int) -> str:
        """Index page `number` (1-based; IndexError past the last)."""
        if not 1 <= number <= len(self.pages):
            raise IndexError(number)
        return self._env.get_template("index.html").render(
            report=self.report,
            page=self.pages[number - 1],
            num_pages=len(self.pages),
            facets=self._facets,
            root=".",
            refresh_s=self.refresh_s,
        )

    def experiment(self, exp: Experiment, site: Path | None) -> str:
        """An experiment's page; its artifacts are copied into `site` (None: served from the
        state folder, as /ui does)."""
        view = experiment_page(self.report, exp, site, self._diffs)
        return self._env.get_template("experiment.html").render(
            report=self.report, page=view, exp=exp, root="..", refresh_s=None
        )


def write_site(report: Report, site: Path) -> Written:
    prepare_site(site)
    renderer = Renderer(report)
    for page in renderer.pages:
        (site / page.filename).write_text(renderer.index(page.number), encoding="utf-8")
    (site / "experiments").mkdir()
    for exp in report.experiments:
        html = renderer.experiment(exp, site)
        (site / experiment_href(exp.id)).write_text(html, encoding="utf-8")
    return Written(site / "index.html", len(report.experiments), len(renderer.pages))


def paginate(chains: list[Chain]) -> list[IndexPage]:
    """Chains in order, cut into pages of PAGE_ROWS rows; a long chain continues on the next
    page (its header says so). An empty ledger is one page."""
    pages: list[IndexPage] = []
    current: list[tuple[Chain, list[ChainRow]]] = []
    room = PAGE_ROWS
    for chain in chains:
        rows = chain.rows
        while rows:
            taken, rows = rows[:room], rows[room:]
            current.append((chain, taken))
            room -= len(taken)
            if room == 0:
                pages.append(IndexPage(len(pages) + 1, current, PAGE_ROWS))
                current, room = [], PAGE_ROWS
    if current or not pages:
        pages.append(IndexPage(len(pages) + 1, current, PAGE_ROWS - room))
    return pages


def prepare_site(site: Path) -> None:
    """An empty folder for the site: a previous report there is replaced, anything else is
    left alone (the user named the wrong folder)."""
    if site.exists() and any(site.iterdir()):
        if not (site / MARKER).is_file():
            raise ReportError(
                f"{site} is not empty and holds no earlier report; name a new or empty folder "
                "with --out"
            )
        shutil.rmtree(site)
    site.mkdir(parents=True, exist_ok=True)
    (site / MARKER).write_text("written by `infra-agent report`; replaced by the next one\n")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt field fails the report, not shows blank
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    env.filters["pretty_json"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
    env.globals.update(
        experiment_href=experiment_href,
        page_filename=page_filename,
        summary_items=SUMMARY_ITEMS,
        row_filters=row_filters,
    )
    return env


def facets(report: Report) -> dict[str, list[str]]:
    """Every value each filter can take over the whole report (the same on every page)."""
    values: dict[str, set[str]] = {}
    for exp in report.experiments:
        for facet, value in row_filters(exp).items():
            if value:
                values.setdefault(facet, set()).add(value)
    return {facet: sorted(v) for facet, v in values.items()}


def row_filters(exp: Experiment) -> dict[str, str]:
    """The data-* attributes the index's filters match on."""
    return {
        "tool": exp.tool,
        "kernel": exp.kernel or "",
        "engine": exp.engine or "",
        "answer": exp.answer,
    }
