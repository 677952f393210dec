"""Every tool takes `expect` and answers `hypothesis_answer`; small tools judge their own plain fields."""

import pytest
from conftest import ToolCallError, call

pytestmark = pytest.mark.anyio


async def test_every_tool_takes_expect_and_answers_the_hypothesis(client):
    tools = (await client.list_tools()).tools
    assert len(tools) >= 8
    for tool in tools:
        assert "expect" in tool.input_schema["properties"], tool.name
        assert "hypothesis_answer" in tool.output_schema["properties"], tool.name
        assert "baseline.<field>" in tool.input_schema["properties"]["expect"]["description"]


async def test_a_small_tool_judges_its_own_plain_fields(client):
    out = await call(
        client,
        "describe_kernel",
        kernel="rmsnorm",
        include_source=False,
        expect=["'float32' in dtypes", "name == 'rmsnorm'", "len(forbidden_ops) == 0"],
    )
    assert [c["answer"] for c in out["hypothesis_answer"]["conditions"]] == [
        "supported",
        "supported",
        "contradicted",
    ]
    assert (
        out["hypothesis_answer"]["answer"] == "contradicted"
        and "Expect: contradicted" in out["summary"]
    )
    plain = await call(client, "list_kernels")
    assert plain["hypothesis_answer"] == {"answer": "not_judged", "conditions": []}
    with pytest.raises(
        ToolCallError,
        match=r"names dtype, which this tool does not report \(did you mean dtypes\?\); it offers name",
    ):
        await call(client, "describe_kernel", kernel="rmsnorm", expect=["dtype == 'float32'"])
