"""What `infra-agent call` does around the MCP call: arguments from the command line, the
exit code a script can branch on, and error text in the terminal's words.

Exit codes of `infra-agent call` (docs/clients.md, "The command line", `infra-agent call --help`):

- 0: the tool answered, and nothing in the answer failed: the hypothesis is supported
  or not judged, and the verdict (if the tool has one) is not a failing one;
- 1: the tool answered, and the answer is negative or undecided: a `verdict` of `fail`,
  `invalid` or `inconclusive`, or `hypothesis_answer` (or serve_benchmark's `criteria`)
  `contradicted` or `inconclusive`;
- 2: usage error: the command line is malformed, the tool does not exist, or the
  arguments do not fit the tool's input schema or expect language (nothing ran);
- 3: tool error: the arguments were well-formed but the tool could not answer (an unknown
  kernel, code that does not compile or raises, a timeout, a sandbox failure); the
  message says what to fix.
"""

from __future__ import annotations

import json
import re
from typing import Any

EXIT_OK, EXIT_NEGATIVE, EXIT_USAGE, EXIT_TOOL_ERROR = 0, 1, 2, 3
EXIT_CODES_HELP = (
    "Exit codes: 0 the answer holds (hypothesis supported or not judged, no failing verdict); "
    "1 it does not (verdict fail/invalid/inconclusive, or hypothesis or criteria contradicted/"
    "inconclusive); 2 usage error (bad command line, unknown tool, arguments the tool's schema "
    "or expect refuses: nothing ran); 3 tool error (it ran but could not answer: unknown kernel, "
    "code that fails, timeout)."
)
FAILING_VERDICTS = frozenset({"fail", "invalid", "inconclusive"})
UNDECIDED_OR_NEGATIVE = frozenset({"contradicted", "inconclusive"})


def parse_arguments(args: list[str]) -> dict[str, Any]:
    """`'{"kernel": "rmsnorm"}'` or `kernel=rmsnorm limit=5` -> a dict."""
    if len(args) == 1 and args[0].lstrip().startswith("{"):
        try:
            value = json.loads(args[0])
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("JSON arguments must be an object")
        return value
    parsed: dict[str, Any] = {}
    for arg in args:
        key, sep, raw = arg.partition("=")
        if not sep or not key:
            raise ValueError(f"argument {arg!r} is not key=value (or pass one JSON object)")
        try:
            parsed[key] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[key] = raw  # a bare word is a string
    return parsed


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    kinds: dict[type, str] = {str: "string", dict: "object", list: "array"}
    return kinds.get(type(value), "unknown")


def _admitted_types(prop: dict) -> set[str]:
    """The JSON types a property's schema admits (its own `type` and its anyOf branches)."""
    types = set()
    for branch in [prop, *prop.get("anyOf", [])]:
        kind = branch.get("type")
        types |= set(kind) if isinstance(kind, list) else {kind} if kind else set()
    return {"number" if t == "integer" else t for t in types}


def lists_from_scalars(arguments: dict[str, Any], schema: dict) -> dict[str, Any]:
    """`dtypes=float32` means `dtypes=["float32"]`: a single value for a field that takes a list
    (and not that value's type) becomes a one-item list, as a person typing it means."""
    properties = schema.get("properties", {})
    fixed = dict(arguments)
    for name, value in arguments.items():
        types = _admitted_types(properties.get(name, {}))
        if "array" in types and _json_type(value) not in types:
            fixed[name] = [value]
    return fixed


def exit_code(data: dict) -> int:
    """0 when the answer holds, 1 when it is negative or undecided (see the module docstring)."""
    judged = [data.get("hypothesis_answer"), data.get("criteria")]
    answers = {j.get("answer") for j in judged if isinstance(j, dict)}
    if data.get("verdict") in FAILING_VERDICTS or answers & UNDECIDED_OR_NEGATIVE:
        return EXIT_NEGATIVE
    return EXIT_OK


_SDK_PREFIX = re.compile(r"^Error executing tool \w+: ")


def terminal_message(text: str, tool: str, tool_names: set[str]) -> str:
    """A tool error as the terminal should say it: what the agent is told to do over MCP
    ("Call tools/list", "Call list_kernels", "read the resource expect://...") in commands."""
    text = _SDK_PREFIX.sub("", text.strip())
    text = text.replace(
        "Call tools/list for this tool's input schema",
        f"`infra-agent tools {tool}` lists its arguments",
    )
    text = re.sub(r"resource expect://(\w+)", r"`infra-agent tools \1`", text)

    def command(match: re.Match) -> str:
        verb, name = match.groups()
        if name not in tool_names:
            return match.group(0)
        return f"{'Run' if verb == 'C' else 'run'} `infra-agent call {name}`"

    return re.sub(r"\b([Cc])all (\w+)", command, text)
