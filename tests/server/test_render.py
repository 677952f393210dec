"""Terminal rendering of results for people: readable at 80 columns."""

from __future__ import annotations

import io

from rich.console import Console

from infra_agent.server import render


def _render(data: dict, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    render.result(console, "some_tool", data)
    return console.export_text()


def test_wide_rows_become_one_field_table_per_row_with_dotted_keys():
    row = {f"col{i}": i for i in range(12)} | {"errors": {"max_abs": 0.25, "ulp": {"p99": 0.5}}}
    text = _render({"summary": "done", "cases": [row, row]}, width=80)
    assert "cases[0]" in text and "cases[1]" in text
    assert "errors.max_abs" in text and "errors.ulp.p99" in text and "0.25" in text


def test_narrow_rows_stay_one_table():
    text = _render(
        {"summary": "done", "shapes": [{"N": 1, "ms": 2.0}, {"N": 2, "ms": 3.0}]}, width=80
    )
    assert "shapes[0]" not in text and "shapes" in text
    assert text.count("┃ N") == 1  # one header row for both
