"""The morning report tells what changed from what was merely compared, in a real browser.

A night of real calls on a user's own kernel (rowscale: impls `good`, `stride_bug` and `slow`
in files of their own): a check of each of two impls (other code, not the same code), an A/B of
`slow` against the reference (a comparison of alternatives, however large the ratio), an edit of
`slow.py` timed against its recorded self (a change: an improvement), and a call that fails
(the index's error list shows its error, not its hypothesis). The numbers shown are checked
against the ledger read with sqlite3; the directions against an interleaved perf_counter A/B of
the same functions run here."""

from __future__ import annotations

import json
import re
import sqlite3
import statistics
import time
from pathlib import Path
from typing import NamedTuple

import anyio
import pytest
from conftest import ToolCallError, call
from mcp import Client
from rowscale_kernel import write_rowscale
from test_report import close_to, launched_chromium, tab

from infra_agent.server.app import build_server
from infra_agent.server.report import Filters, build_report

SLOW = "def rowscale(x):\n    out = 2 * x\n    for _ in range({n}):\n        out = 2 * x\n    return out\n"
IMPLS = {"good": "good.py:rowscale", "slow": "slow.py:rowscale"}
FILES = {"good.py": "def rowscale(x):\n    return x + x\n", "slow.py": SLOW.format(n=40)}
SHAPE = [{"M": 64, "N": 1024}]


class Night(NamedTuple):
    workspace: Path
    state_dir: Path
    check_good: str
    check_bug: str
    against_reference: str  # slow vs the reference: compared
    slow_before: str
    slow_after: str  # slow.py edited (40 -> 2 extra passes), baseline=slow_before: a change
    broken: str


RATIO_CI = r"time ratio ([\d.]+), 95% CI \[([\d.]+), ([\d.]+)\]"
HYPOTHESIS_OF_BROKEN = "a lambda is as good as a function"


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> Night:
    root = tmp_path_factory.mktemp("changes") / "ws"
    write_rowscale(root, IMPLS, FILES, SHAPE[0])
    return anyio.run(_calls, root)


async def _calls(root: Path) -> Night:
    server = build_server(root)
    bench = dict(kernel="rowscale", shapes=SHAPE, budget_ms=1500)
    try:
        async with Client(server) as client:
            good = await call(client, "check_numerics", kernel="rowscale", impl="good", trials=1)
            bug = await call(
                client, "check_numerics", kernel="rowscale", impl="stride_bug", trials=1
            )
            compared = await call(client, "microbench", impl="slow", baseline="reference", **bench)
            before = await call(client, "microbench", impl="slow", **bench)
            (root / "kernels" / "rowscale" / "slow.py").write_text(SLOW.format(n=2))
            after = await call(
                client, "microbench", impl="slow", baseline=before["experiment_id"], **bench
            )
            with pytest.raises(ToolCallError):
                await call(
                    client,
                    "check_numerics",
                    kernel="rowscale",
                    source="def rowscale(x):\n    return x +\n",
                    entry="rowscale",
                    hypothesis=HYPOTHESIS_OF_BROKEN,
                )
    finally:
        await server.aclose()
    state = root / ".infra-agent"
    with sqlite3.connect(state / "ledger.sqlite") as db:
        (broken,) = db.execute("SELECT id FROM experiments ORDER BY seq DESC LIMIT 1").fetchone()
    ids = [o["experiment_id"] for o in (good, bug, compared, before, after)]
    return Night(root, state, *ids, broken)


@pytest.fixture(scope="module")
def browser(night: Night):
    yield from launched_chromium()


@pytest.fixture(scope="module")
def site(night: Night, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site") / "site"
    build_report(night.state_dir, folder, Filters())
    return folder


def shape_of(night: Night, experiment_id: str) -> dict:
    with sqlite3.connect(night.state_dir / "ledger.sqlite") as db:
        (text,) = db.execute(
            "SELECT result FROM experiments WHERE id=?", (experiment_id,)
        ).fetchone()
    return json.loads(text)["shapes"][0]


def perf_counter_ratio(slow_passes: int) -> float:
    """slow.py with `slow_passes` extra passes / the reference, interleaved here: the witness."""
    import torch

    scope: dict = {}
    exec(SLOW.format(n=slow_passes), scope)
    slow, x = scope["rowscale"], torch.randn(64, 1024)
    times: dict[str, list[float]] = {"slow": [], "reference": []}
    for _ in range(30):
        for name, fn in (("slow", slow), ("reference", lambda t: 2 * t)):
            start = time.perf_counter()
            fn(x)
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["slow"]) / statistics.median(times["reference"])


def test_a_comparison_is_not_a_regression_and_an_edit_is_a_change(browser, night, site):
    compared = shape_of(night, night.against_reference)
    changed = shape_of(night, night.slow_after)
    assert compared["verdict"] == "slower" and perf_counter_ratio(40) > 1  # the witness agrees
    assert changed["verdict"] == "faster"
    with tab(browser, site) as page:
        page.goto((site / "index.html").as_uri())
        assert page.locator("#card-comparisons b").inner_text() == "1"
        assert page.locator("#card-regressions b").inner_text() == "0"
        assert page.locator("#card-improvements b").inner_text() == "1"
        assert page.locator("#regressions").count() == 0  # nothing got worse by a change
        item = page.locator("#comparisons li").inner_text()
        assert night.against_reference in item and "slow against reference" in item, item
        if compared["ratio"] >= 2:  # "41 times as slow", never "4000.0% slower"
            assert f"{compared['ratio']:.3g} times as slow" in item and "% slower" not in item, item
        shown = [float(x) for x in re.search(RATIO_CI, item).groups()]
        assert all(
            map(close_to, shown, (compared["ratio"], compared["ci_low"], compared["ci_high"]))
        )
        better = page.locator("#improvements li").inner_text()
        assert night.slow_after in better and "times as fast" in better

        page.goto((site / "experiments" / f"{night.against_reference}.html").as_uri())
        assert "a comparison of alternatives" in page.locator("#ab-relation").inner_text()
        page.goto((site / "experiments" / f"{night.slow_after}.html").as_uri())
        assert "a change" in page.locator("#ab-relation").inner_text()


def test_two_impls_are_other_code_not_the_same(browser, night, site):
    with tab(browser, site) as page:
        page.goto((site / "index.html").as_uri())
        cell = page.locator(f"#row-{night.check_bug} td.code").inner_text()
        assert cell.startswith("other code"), cell
        page.click(f"#row-{night.check_bug} a")
        code = page.locator("#code").inner_text()
        assert "Other code than" in code and "different files" in code, code
        role = page.locator("#code .role[data-role=candidate]").inner_text()
        assert "good (kernels/rowscale/good.py:rowscale)" in role
        assert "stride_bug (kernels/rowscale/stride_bug.py:rowscale)" in role
        assert "+    return (2 * x.reshape(-1)).view(x.shape)" in code  # the two functions' diff


def test_the_error_list_shows_the_error(browser, night, site):
    with tab(browser, site) as page:
        page.goto((site / "index.html").as_uri())
        item = page.locator("#errors li").filter(has_text=night.broken)
        error = item.locator(".error-message").inner_text()
        assert "SyntaxError" in error and HYPOTHESIS_OF_BROKEN not in error, error
        assert HYPOTHESIS_OF_BROKEN in item.locator(".muted").inner_text()


def test_what_an_ab_is_from_its_arguments():
    """The rule the summary applies (numbers.ab_relation): an A/B of one impl under two launch
    configs (BLOCK=256 against BLOCK=16) is a comparison; baseline=<an experiment> is a change
    unless the candidate is another function or file than the one that experiment ran."""
    from infra_agent.kernels.code_identity import RanCode
    from infra_agent.server.report.numbers import ab_relation

    configs = {
        "impl": "triton",
        "baseline": "triton",
        "launch_config": {"BLOCK": 256},
        "baseline_launch_config": {"BLOCK": 16},
    }
    assert ab_relation(configs, {}) == "comparison"
    assert ab_relation({"impl": "triton", "baseline": "reference"}, {}) == "comparison"
    assert ab_relation({"impl": "triton", "baseline_source": "def f(x): ..."}, {}) == "comparison"
    assert ab_relation({"impl": "triton"}, {}) is None
    earlier = {"impl": "triton", "baseline": "e00012-3f9a"}
    assert ab_relation(earlier, {}) == "change"  # a row recorded before roles: as before
    good = RanCode("good", "k/good.py", "rowscale", None, {"k/good.py": "1" * 64})
    edited = RanCode("good", "k/good.py", "rowscale", None, {"k/good.py": "2" * 64})
    other = RanCode(
        "stride_bug", "k/stride_bug.py", "rowscale", None, {"k/stride_bug.py": "3" * 64}
    )
    assert ab_relation(earlier, {"candidate": edited, "baseline": good}) == "change"
    assert ab_relation(earlier, {"candidate": other, "baseline": good}) == "comparison"
