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
"""

from __future__ import annotations

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
PINNED = {"device_info": {"measure_peaks": False},
          "launch_serve": {"engine": "command", "args": {"command": ["/bin/false"]}, "ready_timeout_s": 5},
          "serve_benchmark": {"handle": "serve-fuzz", "engine": None}}


def _broken(schema: dict) -> st.SearchStrategy[dict]:
    """Arguments that break the schema: a field given a value of another kind, or too big."""
    names = sorted(schema["properties"]) or ["hypothesis"]
    bad_value = st.one_of(st.text(min_size=3000, max_size=3000), st.integers(min_value=10**20),
                          st.floats(allow_nan=False, allow_infinity=False, min_value=1e16),
                          st.lists(st.integers(), min_size=65, max_size=70), st.dictionaries(st.text(), st.none()),
                          st.booleans(), st.none())
    return st.one_of(st.fixed_dictionaries({}, optional={n: bad_value for n in names}),
                     st.fixed_dictionaries({"no_such_argument": st.integers()}))


def _check(tool, result) -> None:
    text = " ".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        assert "internal error" not in text, f"{tool.name}: {text}"
        assert len(text) <= MAX_ERROR_CHARS + 200, f"{tool.name}: a {len(text)}-char error"
        return
    assert result.structured_content is not None, f"{tool.name} returned no structured content"
    jsonschema.validate(result.structured_content, tool.output_schema)


def _fuzz(portal, client, tool, strategy, count: int) -> None:
    pinned = PINNED.get(tool.name, {})

    @settings(max_examples=count, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one_call(arguments: dict) -> None:
        _check(tool, portal.call(client.call_tool, tool.name, {**arguments, **pinned}))

    one_call()


@pytest.mark.timeout(300)
def test_every_tool_answers_fuzzed_arguments_cleanly(workspace):
    server = build_server(workspace)
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(Client(server)) as client:
            tools = portal.call(client.list_tools).tools
            assert len(tools) >= 8
            for tool in tools:
                _fuzz(portal, client, tool, from_schema(tool.input_schema), EXAMPLES_PER_TOOL)
                _fuzz(portal, client, tool, _broken(tool.input_schema), BROKEN_PER_TOOL)
            again = portal.call(client.call_tool, "list_kernels", {})
            assert not again.is_error and again.structured_content["kernels"]
        portal.call(server.aclose)
