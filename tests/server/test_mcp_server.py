"""The server through the in-memory MCP client: schemas, structured results, the ledger,
resources, prompts, progress, and errors that leave the server serving."""

from __future__ import annotations

import base64
import json
import re
import threading

import pytest
from conftest import ToolCallError, call
from mcp.shared.exceptions import MCPError
from pydantic import Field

from infra_agent.kernels.workspace import load_workspace
from infra_agent.server import app as server_app
from infra_agent.tools.base import AgentError, Tool, ToolInput, ToolOutput

pytestmark = pytest.mark.anyio

OWN_TOOLS = {
    "list_kernels",
    "describe_kernel",
    "device_info",
    "list_experiments",
    "compare_experiments",
}


async def test_tools_have_schemas_titles_and_annotations(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert OWN_TOOLS <= set(tools)
    for tool in tools.values():
        assert tool.input_schema["type"] == "object"
        assert "hypothesis" in tool.input_schema["properties"]
        assert tool.output_schema and tool.output_schema["type"] == "object"
        assert "experiment_id" in tool.output_schema["properties"]
        assert tool.title and tool.description
        assert tool.annotations is not None and tool.annotations.read_only_hint is not None
    describe = tools["describe_kernel"]
    assert describe.input_schema["required"] == ["kernel"]
    assert describe.input_schema["additionalProperties"] is False
    assert (
        describe.annotations.read_only_hint is True and describe.annotations.idempotent_hint is True
    )
    assert (
        describe.annotations.open_world_hint is False
        and describe.annotations.destructive_hint is False
    )


# (read-only, idempotent) per tool as listed over MCP; open-world and destructive are False for
# all. Written out so that a change of Tool's defaults cannot move an annotation unnoticed.
ANNOTATIONS = {
    "check_numerics": (True, False),
    "compare_experiments": (True, True),
    "compile_kernel": (True, True),
    "describe_kernel": (True, True),
    "device_info": (True, True),
    "launch_serve": (False, False),
    "list_experiments": (True, False),
    "list_kernels": (True, True),
    "list_serves": (True, True),
    "microbench": (True, False),
    "profile": (True, False),
    "serve_benchmark": (False, False),
    "stop_serve": (False, False),
    "sweep_kernel": (True, False),
    "sweep_serve": (False, False),
}


async def test_every_tools_annotations_are_pinned(client):
    listed = {t.name: t.annotations for t in (await client.list_tools()).tools}
    assert set(listed) == set(ANNOTATIONS)
    for name, a in listed.items():
        assert (a.read_only_hint, a.idempotent_hint) == ANNOTATIONS[name], name
        assert a.open_world_hint is False and a.destructive_hint is False, name


async def test_list_kernels_structured(client, workspace):
    out = await call(client, "list_kernels")
    names = [k["name"] for k in out["kernels"]]
    assert names == sorted(load_workspace(workspace).kernels) and {"rmsnorm", "vector_add"} <= set(
        names
    )
    rms = out["kernels"][names.index("rmsnorm")]
    assert rms["impls"] == ["triton"] and rms["has_partition"]
    assert rms["shape_sets"]["cpu"][0] == {"M": 4, "N": 64} and len(rms["shape_sets"]["gpu"]) == 3
    assert out["experiment_id"].startswith("e")


async def test_describe_rmsnorm_cost_model_and_sources(client):
    out = await call(client, "describe_kernel", kernel="rmsnorm")
    assert out["name"] == "rmsnorm" and [a["name"] for a in out["args"]] == ["x", "weight"]
    first = out["shapes"][0]
    assert first["shape"] == {"M": 4, "N": 64} and first["flops"] == 4 * 4 * 64 + 4
    fp32 = next(d for d in first["per_dtype"] if d["dtype"] == "float32")
    assert fp32["bytes"] == (2 * 4 * 64 + 64) * 4
    assert fp32["arithmetic_intensity"] == pytest.approx(first["flops"] / fp32["bytes"])
    fp16 = next(d for d in first["per_dtype"] if d["dtype"] == "float16")
    assert fp16["bytes"] == fp32["bytes"] / 2
    assert {t["dtype"] for t in out["tolerances"]} == {"float32", "float16", "bfloat16"}
    assert all(t["why"] for t in out["tolerances"])
    assert out["partition"] == {"args": {"x": 0}, "num_parts": 2, "combine": "concat", "out_dim": 0}
    assert "aten::rsqrt" in out["forbidden_ops"]
    assert (
        "def rmsnorm" in out["sources"]["reference"] and "@triton.jit" in out["sources"]["triton"]
    )


async def test_ledger_records_every_call_and_list_filters(client, server):
    a = await call(
        client, "describe_kernel", kernel="rmsnorm", hypothesis="rmsnorm is memory-bound"
    )
    b = await call(client, "describe_kernel", kernel="vector_add", include_source=False)
    with pytest.raises(ToolCallError):
        await call(client, "describe_kernel", kernel="nope")
    row = server.state.ledger.get(a["experiment_id"])
    assert row["tool"] == "describe_kernel" and row["kernel"] == "rmsnorm" and row["status"] == "ok"
    assert row["hypothesis"] == "rmsnorm is memory-bound"
    assert row["arguments"] == {"kernel": "rmsnorm", "hypothesis": "rmsnorm is memory-bound"}
    assert (
        row["result"]["name"] == "rmsnorm" and row["device_fingerprint"] and row["duration_s"] >= 0
    )
    assert row["git_commit"] is None  # the tmp workspace is not a git repository

    listed = await call(client, "list_experiments", tool="describe_kernel")
    assert [e["status"] for e in listed["experiments"]] == ["error", "ok", "ok"]
    assert listed["experiments"][1]["id"] == b["experiment_id"]
    assert "unknown kernel" in listed["experiments"][0]["summary"]
    only_rms = await call(client, "list_experiments", kernel="rmsnorm")
    assert [e["id"] for e in only_rms["experiments"]] == [a["experiment_id"]]
    assert only_rms["experiments"][0]["hypothesis"] == "rmsnorm is memory-bound"
    future = await call(client, "list_experiments", since="2999-01-01T00:00:00Z")
    assert future["experiments"] == []
    recent = await call(client, "list_experiments", since="1h")
    assert len(recent["experiments"]) == 3  # ledger queries themselves are hidden by default
    with pytest.raises(ToolCallError, match="since="):
        await call(client, "list_experiments", since="yesterday-ish")


async def test_compare_experiments_reports_inputs_and_result_moves(client):
    a = await call(client, "describe_kernel", kernel="rmsnorm", include_source=False)
    b = await call(client, "describe_kernel", kernel="vector_add", include_source=False)
    cmp = await call(client, "compare_experiments", a=a["experiment_id"], b=b["experiment_id"])
    assert {
        "field": "kernel",
        "before": "rmsnorm",
        "after": "vector_add",
        "delta": None,
        "ratio": None,
    } in cmp["input_changes"]
    # each ran its own kernel folder (spec.py, reference, impls): the snapshots differ
    assert cmp["device"]["same_device"] is True and cmp["code"]["same_code"] is False
    assert {
        "field": "name",
        "before": "rmsnorm",
        "after": "vector_add",
        "delta": None,
        "ratio": None,
    } in cmp["changed_strings"]
    # rmsnorm cpu shape 0 is 4x64 (1028 FLOPs), vector_add's is N=1000 (1000 FLOPs)
    flops = next(c for c in cmp["numeric_changes"] if c["field"] == "shapes.0.flops")
    assert flops["before"] == 1028 and flops["after"] == 1000 and flops["delta"] == -28
    assert flops["ratio"] == pytest.approx(1000 / 1028)
    assert cmp["num_unchanged"] > 0
    with pytest.raises(ToolCallError, match="no experiment"):
        await call(client, "compare_experiments", a=a["experiment_id"], b="e99999-0000")


async def test_bad_input_is_a_clear_tool_error_and_server_keeps_serving(client, server):
    with pytest.raises(
        ToolCallError, match="unknown kernel 'nope'; this workspace has: .*rmsnorm.*vector_add"
    ):
        await call(client, "describe_kernel", kernel="nope")
    with pytest.raises(ToolCallError, match="unknown argument 'kernal'"):
        await call(client, "describe_kernel", kernal="rmsnorm")
    with pytest.raises(ToolCallError, match="include_source"):
        await call(client, "describe_kernel", kernel="rmsnorm", include_source="maybe")
    with pytest.raises(ToolCallError, match="limit"):
        await call(client, "list_experiments", limit=0)
    unknown = await client.call_tool("no_such_tool", {})
    assert unknown.is_error
    rejected = server.state.ledger.query(tool="describe_kernel", limit=3)
    assert [r["status"] for r in rejected] == ["error"] * 3  # rejected calls are on record too
    assert (await call(client, "list_kernels"))["kernels"]  # still serving


async def test_resources_experiments_and_artifacts(client, server):
    out = await call(client, "describe_kernel", kernel="rmsnorm", include_source=False)
    eid = out["experiment_id"]
    listed = (await client.list_resources()).resources
    assert f"experiment://{eid}" in [str(r.uri) for r in listed]
    templates = {
        t.uri_template for t in (await client.list_resource_templates()).resource_templates
    }
    assert templates == {
        "experiment://{experiment_id}",
        "artifact://{experiment_id}/{name}",
        "code://{experiment_id}/{sha256}",
        "expect://{tool}",
    }

    read = await client.read_resource(f"experiment://{eid}")
    row = json.loads(read.contents[0].text)
    assert row["id"] == eid and row["result"]["name"] == "rmsnorm"

    from infra_agent.server.context import CallContext

    ctx = CallContext(server.state, eid)
    text_uri = ctx.artifact("kernel.ptx", "// ptx text")
    blob_uri = ctx.artifact("plot.png", b"\x89PNG\r\n\x1a\n\x00\x01")
    assert text_uri == f"artifact://{eid}/kernel.ptx"
    text = (await client.read_resource(text_uri)).contents[0]
    assert text.text == "// ptx text" and text.mime_type == "text/plain"
    blob = (await client.read_resource(blob_uri)).contents[0]
    assert blob.mime_type == "image/png" and blob.blob
    with pytest.raises(ValueError):
        ctx.artifact("../escape.txt", "x")
    with pytest.raises(MCPError):
        await client.read_resource(f"artifact://{eid}/missing.txt")


async def test_a_late_artifact_is_listed_at_once_and_waited_for(client, server):
    eid = (await call(client, "describe_kernel", kernel="rmsnorm", include_source=False))[
        "experiment_id"
    ]
    from infra_agent.server.context import CallContext

    ctx = CallContext(server.state, eid)
    drawing = threading.Event()

    def slow_plot() -> bytes:
        drawing.wait(10)
        return b"\x89PNG\r\n\x1a\n late"

    uri = ctx.artifact_later("late.png", slow_plot)
    assert uri == f"artifact://{eid}/late.png" and ctx.artifacts == [uri]
    folder = server.state.artifacts_dir / eid
    assert not (folder / "late.png").exists()  # not drawn yet: the call did not wait for it
    threading.Timer(0.2, drawing.set).start()
    blob = (await client.read_resource(uri)).contents[0]  # waits for the drawing
    assert base64.b64decode(blob.blob).endswith(b" late") and sorted(
        p.name for p in folder.iterdir()
    ) == ["late.png"]

    drawing.clear()
    ctx.artifact_later("next.png", slow_plot)
    threading.Timer(1.5, drawing.set).start()  # well after list_kernels alone would have returned
    await call(client, "list_kernels")  # a new call waits for earlier plots before it starts
    assert (folder / "next.png").is_file()

    def broken_plot() -> bytes:
        raise RuntimeError("no finite values")

    broken = ctx.artifact_later("broken.png", broken_plot)
    with pytest.raises(MCPError, match="could not be made .*no finite values"):
        await client.read_resource(broken)


async def test_prompts_teach_the_loop(client):
    names = {p.name for p in (await client.list_prompts()).prompts}
    assert names == {"optimize_kernel", "hunt_regression", "verify_numerics"}
    got = await client.get_prompt("optimize_kernel", {"kernel": "rmsnorm"})
    text = got.messages[0].content.text
    assert "rmsnorm" in text and "hypothesis" in text.lower()
    assert (
        "`expect`" in text and "hypothesis_answer" in text
    )  # the one way a hypothesis is answered
    ladder = [
        text.index(f"{i}. {tool}")
        for i, tool in enumerate(["compile_kernel", "check_numerics", "microbench"], start=1)
    ]
    assert ladder == sorted(ladder)
    # only tools this server has are offered: naming a missing one sends the agent into errors
    offered = set(re.findall(r"^\d\. (\w+)", text, flags=re.M))
    tools = {t.name for t in (await client.list_tools()).tools}
    assert offered and offered <= tools
    hunt = await client.get_prompt(
        "hunt_regression", {"good_experiment": "e1", "bad_experiment": "e2"}
    )
    assert 'compare_experiments(a="e1", b="e2")' in hunt.messages[0].content.text


# --- the adapter itself, with tools made up for the test ---------------------------------


class EchoInput(ToolInput):
    n: int = Field(description="How many progress steps.")
    fail: str = Field(default="", description="'agent' or 'crash' to fail that way.")


class EchoOutput(ToolOutput):
    n: int = Field(description="Echo of n.")


async def _echo(inp: EchoInput, ctx) -> EchoOutput:
    for i in range(inp.n):
        await ctx.progress(i + 1, inp.n, f"step {i + 1}")
    ctx.artifact("log.txt", "hello")
    if inp.fail == "agent":
        raise AgentError("n is too large; pass a smaller n")
    if inp.fail == "crash":
        raise KeyError("oops")
    return EchoOutput(n=inp.n, summary="echoed")


ECHO = Tool(
    name="echo",
    title="Echo",
    description="Test tool.",
    input_model=EchoInput,
    output_model=EchoOutput,
    run=_echo,
)


@pytest.fixture
async def echo_client(workspace, monkeypatch):
    from mcp import Client

    monkeypatch.setattr(server_app, "discover_tools", lambda: {"echo": ECHO})
    srv = server_app.build_server(workspace)
    async with Client(srv) as c:
        yield c, srv
    await srv.aclose()


async def test_progress_artifacts_and_error_mapping(echo_client):
    client, srv = echo_client
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    result = await client.call_tool("echo", {"n": 3}, progress_callback=on_progress)
    out = result.structured_content
    assert out["n"] == 3 and out["artifacts"] == [f"artifact://{out['experiment_id']}/log.txt"]
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert srv.state.ledger.get(out["experiment_id"])["artifacts"] == out["artifacts"]

    agent = await client.call_tool("echo", {"n": 0, "fail": "agent"})
    assert agent.is_error and "n is too large; pass a smaller n" in agent.content[0].text
    crash = await client.call_tool("echo", {"n": 0, "fail": "crash"})
    assert (
        crash.is_error
        and "internal error in echo" in crash.content[0].text
        and "KeyError" in crash.content[0].text
    )
    statuses = [r["status"] for r in srv.state.ledger.query(tool="echo")]
    assert statuses == ["error", "error", "ok"]
    assert (await client.call_tool("echo", {"n": 1})).structured_content["n"] == 1


async def test_a_crash_before_the_run_is_an_internal_error_not_a_cancel(echo_client, monkeypatch):
    """Seen in the eval (issue 38): ast.parse raising SystemError while a call's code was
    recorded was filed in the ledger as "cancelled by the client", and the agent got the SDK's
    bare "Error executing tool"."""
    from infra_agent.server.context import CallContext

    client, srv = echo_client

    def crash(self, kernel, arguments):
        raise SystemError("AST constructor recursion depth mismatch (before=36, after=35)")

    monkeypatch.setattr(CallContext, "record_code", crash)
    result = await client.call_tool("echo", {"n": 1})
    text = result.content[0].text
    assert result.is_error and "internal error in echo before it ran" in text
    assert "SystemError: AST constructor recursion depth mismatch" in text
    [row] = srv.state.ledger.query(tool="echo")
    assert row["status"] == "error" and "internal error" in row["error"]
    assert "cancelled" not in row["error"]


async def test_workspace_edits_are_seen_without_a_restart(client, workspace):
    import shutil

    before = {k["name"] for k in (await call(client, "list_kernels"))["kernels"]}
    copy = workspace / "vector_add_copy"
    shutil.copytree(workspace / "vector_add", copy)
    spec = copy / "spec.py"
    spec.write_text(spec.read_text().replace('name="vector_add"', 'name="vector_add_copy"'))
    after = {k["name"] for k in (await call(client, "list_kernels"))["kernels"]}
    assert after == before | {"vector_add_copy"}

    (workspace / "infra-agent.toml").write_text("[kernels\n")  # a half-written config
    with pytest.raises(ToolCallError, match="invalid TOML"):
        await call(client, "list_kernels")
    (workspace / "infra-agent.toml").write_text('[kernels]\npaths = ["rmsnorm"]\n')
    assert [k["name"] for k in (await call(client, "list_kernels"))["kernels"]] == ["rmsnorm"]


async def test_a_call_made_by_a_call_is_an_experiment_of_its_own_and_its_child(client, server):
    """What a sweep does for each trial (CallContext.call): the child is a full experiment (ledger
    row, code snapshot, result) whose parent_id names the caller; a failing child is an outcome with
    the agent's error, closed in the ledger, not an exception; the parent lists its children."""
    parent = (await call(client, "describe_kernel", kernel="rmsnorm", include_source=False))[
        "experiment_id"
    ]
    from infra_agent.server.context import CallContext

    ctx = CallContext(server.state, parent)
    ok = await ctx.call("describe_kernel", {"kernel": "vector_add", "include_source": False})
    bad = await ctx.call("describe_kernel", {"kernel": "no_such_kernel"})
    assert ok.ok and ok.result is not None and ok.result["name"] == "vector_add"
    assert not bad.ok and bad.result is None and "no_such_kernel" in (bad.error or "")
    rows = {r["id"]: r for r in server.state.ledger.children(parent)}
    assert list(rows) == [ok.experiment_id, bad.experiment_id]
    assert rows[ok.experiment_id]["status"] == "ok" and rows[bad.experiment_id]["status"] == "error"
    assert rows[ok.experiment_id]["code"]["files"]  # the child's own snapshot: vector_add's folder
    listed = json.loads((await client.read_resource(f"experiment://{parent}")).contents[0].text)
    assert [c["id"] for c in listed["children"]] == [ok.experiment_id, bad.experiment_id]
    assert server.state.ledger.get(parent)["parent_id"] is None  # the agent's own call
    # list_experiments: the agent's calls by default; a sweep's trials when asked for them
    listed = await call(client, "list_experiments")
    assert {e["id"] for e in listed["experiments"]} == {parent}
    trials = await call(client, "list_experiments", sweep=parent)
    assert [e["id"] for e in trials["experiments"]] == [bad.experiment_id, ok.experiment_id]
    assert all(e["parent_id"] == parent for e in trials["experiments"])
    everything = await call(client, "list_experiments", include_trials=True)
    assert len(everything["experiments"]) == 3
