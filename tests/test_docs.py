"""The README and docs/ hold together (issue 37): every relative link resolves (a file, and its
#anchor where it names one), every tool the server lists has a section of its own in docs/, and
the README stays a first-ten-minutes page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra_agent.server.app import TOOL_IMPORT_ERRORS, discover_tools

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 400

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?: \"[^\"]*\")?\)")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a shell block is no heading, and
    a link in one does not render)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _without_code_spans(line: str) -> str:
    return re.sub(r"`[^`]*`", "", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (hyphens and
    underscores kept), spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose_lines(page.read_text()):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    """Every link target outside code; a link's text may wrap onto the next line."""
    prose = "\n".join(_without_code_spans(line) for line in _prose_lines(page.read_text()))
    return LINK.findall(prose)


def test_slug_matches_github_on_headings_of_these_pages():
    assert slug("Serving: launch an engine, load-test it, say which phase moved") == (
        "serving-launch-an-engine-load-test-it-say-which-phase-moved"
    )
    assert slug("GLM via tool calls: `infra-agent agent`") == "glm-via-tool-calls-infra-agent-agent"
    assert slug("Measured (this 2-core machine, no GPU)") == "measured-this-2-core-machine-no-gpu"
    assert slug("launch_config") == "launch_config"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, file: ...
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_the_link_check_sees_a_broken_link(tmp_path: Path):
    page = tmp_path / "p.md"
    page.write_text(
        "# Title\n\n[ok](#title) [gone](missing.md) `[code](nope.md)` [two\nlines](x.md)\n"
    )
    assert links(page) == ["#title", "missing.md", "x.md"]
    assert anchors(page) == {"title"}


def _docs_headings() -> list[str]:
    return [
        m.group(2)
        for page in sorted(DOCS.glob("*.md"))
        for line in _prose_lines(page.read_text())
        if (m := HEADING.match(line))
    ]


def heading_subjects(heading: str) -> set[str]:
    """The names a heading is about: what comes before its colon, split at commas and "and"
    ("launch_serve, stop_serve and list_serves: ..." -> the three). A page title such as
    "The kernel loop: compile_kernel ..." names none of them."""
    head = heading.replace("`", "").split(":", 1)[0]
    return {part.strip() for part in re.split(r",| and ", head) if part.strip()}


def test_every_tool_has_a_section_in_docs():
    tools = discover_tools()
    assert TOOL_IMPORT_ERRORS == {} and len(tools) >= 15
    named = set().union(*(heading_subjects(h) for h in _docs_headings()))
    missing = sorted(set(tools) - named)
    assert not missing, f"no heading in docs/ is about {missing}: add a section for each"


def test_readme_is_a_first_ten_minutes_page():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    for command in ("make run", "make test", "pipx install", "uv tool install", "uvx --from"):
        assert command in text, command
    assert "docs/" in text
