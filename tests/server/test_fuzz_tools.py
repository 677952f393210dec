"""Schema-driven fuzzing of every tool through the in-memory MCP client (issue 10).

For each tool the server lists, hypothesis-jsonschema draws arguments from the tool's
own input schema (its limits included: maxLength, maxItems, maximum), plus a second
stream of arguments that break the schema on purpose (over-long strings, wrong types,
unknown keys). Every call must come back as a result or a clean tool error, never an
internal error, and every result must validate against the tool's output schema. One
server serves them all; it must answer a plain call at the end.

Counts: EXAMPLES_PER_TOOL (12) schema-valid draws plus BROKEN_PER_TOOL (6) broken
ones for each of the 8 tools: 144 calls, derandomized (the same draws every run).
`device_info.measure_peaks` is pinned to false: true starts a measurement of several
seconds per draw, which is microbench's and device_info's own tests' business. The serving
tools are pinned to cheap paths for the same reason (every other field is still drawn and
validated): launch_serve to a `command` engine that exits at once, serve_benchmark to a
handle that does not exist (so no draw starts an engine or sends thousands of requests);
their real runs are tests/serving/tools' business.

Issue 27 added a third stream, EDGES: the odd `expect` strings (deep nesting, overflow,
division by zero) and path traversal in every path-like field, and a tally per tool: calls,
clean errors, successes, internal errors, unanswered (no answer within CALL_LIMIT_S) and
schema-breaking answers; the last three must be 0. The tally is printed (pytest -s) and
written to $FUZZ_TALLY when that is set.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import anyio
import anyio.from_thread
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from mcp import Client

from infra_agent.server.app import build_server
from infra_agent.server.limits import MAX_ERROR_CHARS

EXAMPLES_PER_TOOL = 12
BROKEN_PER_TOOL = 6
CALL_LIMIT_S = 120  # a call without an answer by then counts as unanswered
PINNED = {
    "device_info": {"measure_peaks": False},
    "launch_serve": {
        "engine": "command",
        "args": {"command": ["/bin/false"]},
        "ready_timeout_s": 5,
    },
    "serve_benchmark": {"handle": "serve-fuzz", "engine": None},
    "profile": {"handle": "serve-fuzz"},
    "sweep_serve": {  # one config whose engine exits at once: dropped, nothing measured
        "engine": "command",
        "base_args": {"command": ["/bin/false"]},
        "space": {"max_num_seqs": [1]},
        "configs": None,
        "ready_timeout_s": 5,
    },
}
ODD_EXPECT = [
    "-" * 30 + "1 > 0",
    "-" * 400 + "1 > 0",
    "not " * 30 + "true",
    "1e308*10 - 1e308*10 == 0",
    "1e308*10 > 0",
    "1/0 > 1",
    "((((((((((1))))))))) > 0",
    "x ==",
    "__import__('os')",
    "a.b.c > 1",
]
ODD_PATHS = [
    "/proc/1/root/etc/passwd",
    "../../../../etc/passwd",
    ".infra-agent/seed-secret",
    "/",
    ".",
    "a\x00b",
    "x/" * 600,
    "/proc/1/root/etc/passwd:f",
]
PATH_FIELDS = {"path", "reference", "baseline", "sharegpt_path", "model"}
# Arguments under which a tool answers (so the odd expect strings reach the judge of a real answer)
SUCCEEDS_WITH = {"describe_kernel": {"kernel": "rmsnorm"}, "list_experiments": {"limit": 5}}


def _broken(schema: dict) -> st.SearchStrategy[dict]:
    """Arguments that break the schema: a field given a value of another kind, or too big."""
    names = sorted(schema["properties"]) or ["hypothesis"]
    bad_value = st.one_of(
        st.text(min_size=3000, max_size=3000),
        st.integers(min_value=10**20),
        st.floats(allow_nan=False, allow_infinity=False, min_value=1e16),
        st.lists(st.integers(), min_size=65, max_size=70),
        st.dictionaries(st.text(), st.none()),
        st.booleans(),
        st.none(),
    )
    return st.one_of(
        st.fixed_dictionaries({}, optional={n: bad_value for n in names}),
        st.fixed_dictionaries({"no_such_argument": st.integers()}),
    )


def _outcome(tool, result) -> str:
    """clean_error, success, internal_error, long_error or schema_breaking."""
    if result is None:
        return "unanswered"
    if isinstance(result, _SchemaBreaking):
        return "schema_breaking"
    text = " ".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        if "internal error" in text:
            return "internal_error"
        return "clean_error" if len(text) <= MAX_ERROR_CHARS + 200 else "long_error"
    if result.structured_content is None:
        return "schema_breaking"
    try:
        jsonschema.validate(result.structured_content, tool.output_schema)
    except jsonschema.ValidationError:
        return "schema_breaking"
    return "success"


class _SchemaBreaking:
    """The client refused the answer itself: its structured content breaks the output schema."""

    def __init__(self, message: str):
        self.content, self.message = [], message


async def _call(client, name: str, arguments: dict):
    with anyio.move_on_after(CALL_LIMIT_S):
        try:
            return await client.call_tool(name, arguments)
        except RuntimeError as exc:
            if "Invalid structured content" not in str(exc):
                raise
            return _SchemaBreaking(str(exc))
    return None


def _fuzz(portal, client, tool, strategy, count: int, tally: Counter, bad: list) -> None:
    pinned = PINNED.get(tool.name, {})

    @settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def one_call(arguments: dict) -> None:
        _record(
            tool,
            {**arguments, **pinned},
            portal.call(_call, client, tool.name, {**arguments, **pinned}),
            tally,
            bad,
        )

    one_call()


def _record(tool, arguments: dict, result, tally: Counter, bad: list) -> None:
    outcome = _outcome(tool, result)
    tally[(tool.name, "calls")] += 1
    tally[(tool.name, outcome)] += 1
    if outcome not in ("clean_error", "success"):
        blocks = getattr(result, "content", [])
        text = getattr(result, "message", "") or " ".join(getattr(c, "text", "") for c in blocks)
        bad.append((tool.name, outcome, json.dumps(arguments, default=str)[:300], text[:500]))


def _edges(tool) -> list[dict]:
    """Odd expect strings for every tool; traversal in every path-like field it has."""
    props = tool.input_schema["properties"]
    cases = [{**SUCCEEDS_WITH.get(tool.name, {}), "expect": [e]} for e in ODD_EXPECT]
    for name in props:
        if name in PATH_FIELDS or name.endswith("_path"):
            cases += [
                {name: p, **({"kernel": "vector_add"} if "kernel" in props else {})}
                for p in ODD_PATHS
            ]
    if "args" in props and "engine" in props:  # the model folder, nested in args
        cases += [
            {"args": {"model": p, "command": ["/bin/false"]}, "engine": "command"}
            for p in ODD_PATHS
        ]
    if "workload" in props:
        cases += [
            {"workload": w}
            for w in (
                {"seed": 2**31},
                {"num_request": 4},
                {"num_requests": 5001},
                {"max_concurrency": 5000},
                {"sharegpt_path": ODD_PATHS[0]},
            )
        ]
    return cases


def _report(tally: Counter, tools) -> str:
    columns = [
        "calls",
        "clean_error",
        "success",
        "internal_error",
        "unanswered",
        "schema_breaking",
        "long_error",
    ]
    lines = ["tool".ljust(20) + "".join(c.rjust(16) for c in columns)]
    for tool in tools:
        lines.append(
            tool.name.ljust(20) + "".join(str(tally[(tool.name, c)]).rjust(16) for c in columns)
        )
    return "\n".join(lines)


@pytest.mark.timeout(900)
def test_every_tool_answers_fuzzed_arguments_cleanly(workspace):
    server = build_server(workspace)
    tally: Counter = Counter()
    bad: list = []
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(Client(server)) as client:
            tools = sorted(portal.call(client.list_tools).tools, key=lambda t: t.name)
            assert len(tools) >= 13
            for tool in tools:
                _fuzz(
                    portal,
                    client,
                    tool,
                    from_schema(tool.input_schema),
                    EXAMPLES_PER_TOOL,
                    tally,
                    bad,
                )
                _fuzz(portal, client, tool, _broken(tool.input_schema), BROKEN_PER_TOOL, tally, bad)
                for arguments in _edges(tool):
                    arguments = {**PINNED.get(tool.name, {}), **arguments}  # the edge wins
                    _record(
                        tool,
                        arguments,
                        portal.call(_call, client, tool.name, arguments),
                        tally,
                        bad,
                    )
            again = portal.call(client.call_tool, "list_kernels", {})
            assert not again.is_error and again.structured_content["kernels"]
        portal.call(server.aclose)
    report = _report(tally, tools)
    print("\n" + report)
    if os.environ.get("FUZZ_TALLY"):
        with open(os.environ["FUZZ_TALLY"], "w") as f:
            f.write(report + "\n" + "\n".join(map(str, bad)) + "\n")
    assert bad == [], "\n".join(map(str, bad))
