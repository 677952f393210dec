"""Terminal rendering of tool results for people (`infra-agent call`, `tools`, `experiments`).

Generic over any tool's output: scalars become a key/value table, lists of objects a
table each, so a new tool needs no renderer of its own. `--json` bypasses this.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

MAX_CELL = 80
MAX_ROWS = 50
MIN_COLUMN_WIDTH = 12  # characters a column needs to stay readable in a table


def _cell(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = "" if value is None else str(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def tool_table(console: Console, tools: list) -> None:
    """One line per tool: its name and the first sentence of its description, cut to the terminal's width."""
    name_width = max((len(t.name) for t in tools), default=0)
    room = max(console.width - name_width - 2, MIN_COLUMN_WIDTH)
    for t in tools:
        text = _first_sentence(t.description or t.title or "")
        if len(text) > room:
            text = text[: room - 1] + "…"
        console.print(f"{t.name:<{name_width}}  {escape(text)}", highlight=False, soft_wrap=True)


def tool_arguments(console: Console, tool) -> None:
    """One tool's arguments (name, type, default, meaning) and what its `expect` may name."""
    console.print(f"[bold]{tool.name}[/]: {escape(tool.description)}", highlight=False)
    schema = tool.input_model.model_json_schema()
    required = set(schema.get("required", []))
    table = Table("argument", "type", "default", "meaning", title="arguments", title_justify="left")
    for name, prop in schema.get("properties", {}).items():
        default = "(required)" if name in required else _cell(prop.get("default"))
        table.add_row(name, _schema_type(prop), default, escape(prop.get("description", "")))
    console.print(table)
    console.print(
        f"[bold]expect[/] may name:\n{escape(tool.catalogue.described())}", highlight=False
    )


def _schema_type(prop: dict) -> str:
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    kinds = []
    for b in branches:
        kind = b.get("type", "object" if "$ref" in b else "any")
        kinds.append(
            f"list of {b['items'].get('type', 'object')}"
            if kind == "array" and "items" in b
            else kind
        )
    return " or ".join(kinds) or "any"


def _first_sentence(description: str) -> str:
    flat = " ".join(description.split())
    return re.split(r"(?<=[.?!])\s", flat, maxsplit=1)[0].rstrip(".:")


def result(console: Console, tool: str, data: dict) -> None:
    if data.get("summary"):
        console.print(f"[bold]{tool}[/]: {escape(str(data['summary']))}", highlight=False)
    scalars = Table("field", "value", title="result", title_justify="left")
    nested: list[tuple[str, Any]] = []
    for key, value in data.items():
        if key == "summary":
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            nested.append((key, value))
        elif (
            isinstance(value, dict)
            and value
            and any(isinstance(v, (dict, list)) for v in value.values())
        ):
            nested.append((key, value))
        elif key == "sources" and isinstance(value, dict):
            nested.append((key, value))
        else:
            scalars.add_row(key, _cell(value))
    console.print(scalars)
    for key, value in nested:
        if isinstance(value, list):
            _print_rows(console, key, value)
        else:
            console.print(_fields_table(key, value))


def _flatten(value: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested objects as dotted keys (errors.max_abs), so every number gets its own line."""
    items: list[tuple[str, Any]] = []
    for k, v in value.items():
        if isinstance(v, dict) and v:
            items += _flatten(v, f"{prefix}{k}.")
        else:
            items.append((f"{prefix}{k}", v))
    return items


def _fields_table(title: str, value: dict) -> Table:
    table = Table("field", "value", title=title, title_justify="left")
    for k, v in _flatten(value):
        table.add_row(k, _cell(v))
    return table


def _print_rows(console: Console, title: str, rows: list[dict]) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    if len(columns) * MIN_COLUMN_WIDTH > console.width:  # too many to read side by side
        for i, row in enumerate(rows[:MAX_ROWS]):
            console.print(_fields_table(f"{title}[{i}]", row))
    else:
        console.print(_rows_table(title, rows, columns))
    if len(rows) > MAX_ROWS:
        console.print(f"{len(rows) - MAX_ROWS} more {title} (use --json)")


def _rows_table(title: str, rows: list[dict], columns: list[str]) -> Table:
    table = Table(*columns, title=title, title_justify="left")
    for row in rows[:MAX_ROWS]:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    return table


def experiments_table(console: Console, rows: list[dict]) -> None:
    if not rows:
        console.print("no experiments yet")
        return
    if console.width < 120:  # a narrow terminal: one header line and one summary line each
        for r in rows:
            ms = f" {r['duration_ms']:.0f} ms" if r.get("duration_ms") is not None else ""
            console.print(
                f"[bold]{r['id']}[/] {r['started_at'][5:16].replace('T', ' ')} {r['tool']} "
                f"{r.get('kernel') or ''} [{'green' if r['status'] == 'ok' else 'red'}]{r['status']}[/]{ms}",
                highlight=False,
            )
            console.print(f"    {escape(r['summary'])}", highlight=False)
            if r.get("hypothesis"):
                console.print(f"    [dim]hypothesis: {escape(r['hypothesis'])}[/]", highlight=False)
        return
    table = Table(title="experiments, newest first", title_justify="left")
    for name in ("id", "started (UTC)", "tool", "kernel", "status", "ms"):
        table.add_column(name, no_wrap=True)
    table.add_column("summary / hypothesis", ratio=1)
    for r in rows:
        ms = f"{r['duration_ms']:.0f}" if r.get("duration_ms") is not None else ""
        started = r["started_at"][5:19].replace("T", " ")  # MM-DD HH:MM:SS
        text = escape(r["summary"])
        if r.get("hypothesis"):
            text += f"\n[dim]hypothesis: {escape(r['hypothesis'])}[/]"
        table.add_row(r["id"], started, r["tool"], r.get("kernel") or "", r["status"], ms, text)
    console.print(table)
