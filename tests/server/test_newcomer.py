"""What a newcomer tripped on (issue 20), through the MCP client: a spec the workspace's paths do
not reach, an argument named in the other tool's number (shape/shapes, dtype/dtypes), and the
list of what `expect` may name cut off mid-word."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import ToolCallError, call

from infra_agent.kernels.workspace import EMBEDDED_ROOT
from infra_agent.server.app import discover_tools
from infra_agent.server.limits import MAX_ERROR_CHARS

pytestmark = pytest.mark.anyio


@pytest.fixture
async def root_spec_client(tmp_path: Path):
    """A workspace as a newcomer makes one: a kernel's spec.py and its files at the root, no toml."""
    from mcp import Client

    from infra_agent.server.app import build_server

    root = tmp_path / "mine"
    shutil.copytree(
        EMBEDDED_ROOT / "vector_add", root, ignore=shutil.ignore_patterns("__pycache__")
    )
    srv = build_server(root)
    async with Client(srv) as client:
        yield client, root
    await srv.aclose()


async def test_a_spec_the_paths_miss_is_named_with_the_setting_that_reaches_it(root_spec_client):
    client, root = root_spec_client
    listed = await call(client, "list_kernels")
    assert listed["kernels"] == []
    assert "kernels/" in listed["summary"] and "infra-agent.toml" in listed["summary"]
    assert 'spec.py is outside them: put paths = ["."] under [kernels]' in listed["summary"]
    with pytest.raises(ToolCallError, match=r"unknown kernel 'vector_add'.*paths = \[\"\.\"\]"):
        await call(client, "describe_kernel", kernel="vector_add")

    (root / "infra-agent.toml").write_text(
        '[kernels]\npaths = ["."]\n'
    )  # what the answer said to do
    listed = await call(client, "list_kernels")
    assert [k["name"] for k in listed["kernels"]] == ["vector_add"]
    assert "outside them" not in listed["summary"] and 'paths = ["."] says' in listed["spec_search"]


async def test_the_twin_of_a_field_is_named(zoo_client):
    """microbench takes dtype, check_numerics dtypes; compile_kernel shape, microbench shapes."""
    with pytest.raises(ToolCallError, match="unknown argument 'dtypes': did you mean 'dtype'"):
        await call(zoo_client, "microbench", kernel="vector_add", dtypes=["float32"])
    with pytest.raises(ToolCallError, match="unknown argument 'shape': did you mean 'shapes'"):
        await call(zoo_client, "microbench", kernel="vector_add", shape={"N": 64})
    with pytest.raises(ToolCallError, match="unknown argument 'dtype': did you mean 'dtypes'"):
        await call(zoo_client, "check_numerics", kernel="vector_add", dtype="float32")
    with pytest.raises(ToolCallError) as unrelated:  # no twin: the plain message, no guess
        await call(zoo_client, "microbench", kernel="vector_add", colour="blue")
    assert "unknown argument 'colour'" in str(unrelated.value) and "did you mean" not in str(
        unrelated.value
    )


async def test_what_expect_may_name_is_listed_whole_and_described_in_a_resource(zoo_client):
    """A long condition with a typo, on every tool: the error names every field whole (the
    descriptions made it pass 4,000 characters and cut it mid-word), suggests the near miss,
    and points at expect://{tool}, which has each name with its meaning and unit."""
    filler = (
        "max(" + ", ".join(["1"] * 140) + ")"
    )  # a long, shallow, valid condition: 423 characters
    required = {
        "compare_experiments": {"a": "e1", "b": "e2"},
        "describe_kernel": {"kernel": "rmsnorm"},
        "microbench": {"kernel": "rmsnorm"},
        "stop_serve": {"handle": "h"},
        "sweep_kernel": {"kernel": "rmsnorm"},
        "sweep_serve": {"ladder": {"concurrencies": [1]}},
    }
    for name, tool in discover_tools().items():
        field = next(iter(tool.catalogue.fields), None) or next(iter(tool.catalogue.scoped))
        with pytest.raises(ToolCallError) as refused:
            await call(
                zoo_client, name, **required.get(name, {}), expect=[f"{field}x + {filler} > 0"]
            )
        text = str(refused.value)
        assert len(text) < MAX_ERROR_CHARS and "[cut:" not in text, name
        offered = set(re.findall(r"\w+", text.split("it offers", 1)[-1]))
        for known in [*tool.catalogue.fields, *tool.catalogue.scoped]:
            assert known in offered, (name, known)
        assert f"did you mean {field}?" in text and f"expect://{name}" in text, name
        resource = await zoo_client.read_resource(f"expect://{name}")
        described = resource.contents[0].text
        for known, meaning in tool.catalogue.fields.items():
            assert f"  {known}: {meaning}" in described, (name, known)


def test_a_field_that_accepts_its_twin_as_an_alias_is_left_alone():
    """A tool may accept both names (an alias): then the twin is an argument, not a mistake."""
    from pydantic import AliasChoices, Field

    from infra_agent.tools.base import ToolInput

    class Either(ToolInput):
        shape: dict[str, int] | None = Field(
            default=None,
            validation_alias=AliasChoices("shape", "shapes"),
            description="Named sizes.",
        )

    assert Either.model_validate({"shapes": {"M": 1}}).shape == {"M": 1}
