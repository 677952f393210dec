"""Issue 10's reproductions through the in-memory MCP client: each gets a short, clean
tool error (or a correct result), and the server answers the next call. None of these
runs a sandbox job: every one is refused before anything runs."""

from __future__ import annotations

import json
import re
import traceback
from pathlib import Path

import jsonschema
import pytest
from conftest import ToolCallError, call

from infra_agent.sandbox.worker import harness
from infra_agent.server.limits import MAX_ERROR_CHARS, MAX_REPLY_CHARS, MAX_STORED_ARGUMENTS_CHARS
from infra_agent.tools.base import MAX_CODE_CHARS, MAX_TEXT_CHARS
from infra_agent.tools.common import seeds

pytestmark = pytest.mark.anyio

SHORT_ERROR = 600  # chars: what "a short error" means here (the message plus the experiment id)


async def _error(client, tool: str, **args) -> str:
    with pytest.raises(ToolCallError) as info:
        await call(client, tool, **args)
    text = str(info.value)
    assert "internal error" not in text, text
    return text


async def _still_serving(client) -> None:
    assert (await call(client, "list_kernels"))["kernels"]


def _path_fields(schema: dict) -> list[str]:
    return [n for n in schema["properties"] if n == "path" or n.endswith("_path")]


def _args_for(schema: dict, field: str, value: str) -> dict:
    """The least a call needs to reach its path check: a kernel, and the entry that goes
    with this path field."""
    props = schema["properties"]
    args = {field: value}
    if "kernel" in props:
        args["kernel"] = "vector_add"
    entry = "entry" if field == "path" else field.removesuffix("_path") + "_entry"
    if entry in props:
        args[entry] = "f"
    return args


async def test_no_path_of_any_tool_names_the_state_folder(client, server, workspace):
    state = server.state.workspace.state_dir
    seeds.trial_seed(state, "e0", 0, 0)  # the per-workspace secret exists
    await call(client, "list_kernels")  # and so does the ledger
    secret = (state / seeds.SECRET_NAME).read_bytes()
    (workspace / "kernels_link").symlink_to(
        state
    )  # a symlink in the workspace into the state folder
    names = [
        ".infra-agent/seed-secret",
        ".infra-agent/ledger.sqlite",
        "kernels/../.infra-agent/seed-secret",
        str(state / "seed-secret"),
        "kernels_link/seed-secret",
        ".infra-agent",
        "./.infra-agent/ledger.sqlite",
    ]
    tools = {t.name: t for t in (await client.list_tools()).tools}
    fields = {(name, f) for name, t in tools.items() for f in _path_fields(t.input_schema)}
    assert {
        ("compile_kernel", "path"),
        ("check_numerics", "path"),
        ("microbench", "path"),
        ("microbench", "baseline_path"),
    } <= fields
    for tool, field in sorted(fields):
        for name in names:
            text = await _error(client, tool, **_args_for(tools[tool].input_schema, field, name))
            assert "state folder" in text, (tool, field, name, text)
            assert (
                "decode" not in text and "byte 0x" not in text and secret.hex()[:8] not in text
            ), text
    # a reference named by file:function goes through the same check
    text = await _error(
        client,
        "check_numerics",
        source="def f(x):\n    return x\n",
        entry="f",
        reference=".infra-agent/seed-secret:f",
        shapes=[{"N": 8}],
        args=[{"name": "x", "shape": ["N"]}],
    )
    assert "state folder" in text
    await _still_serving(client)


async def test_bad_file_names_are_clean_errors(client):
    for path, why in [
        ("a" * 256 + ".py", "longer than 255 bytes"),
        ("a\x00b.py", "NUL byte"),
        ("/proc/1/root/etc/passwd", "outside the workspace|cannot open"),
        ("x/" * 600, "longer than 1024|at most 1024"),
        ("/etc/passwd", "outside the workspace"),
    ]:
        for tool, extra in [
            ("compile_kernel", {}),
            ("microbench", {"kernel": "vector_add", "entry": "f"}),
            ("check_numerics", {"kernel": "vector_add", "entry": "f"}),
        ]:
            text = await _error(client, tool, path=path, **extra)
            assert len(text) < SHORT_ERROR and re.search(why, text), (tool, path, text)
    await _still_serving(client)


async def test_free_text_is_bounded_in_arguments_errors_and_the_ledger(client, server):
    big = "x" * 1_000_000
    text = await _error(client, "list_kernels", hypothesis=big)
    assert f"at most {MAX_TEXT_CHARS} characters" in text and len(text) < SHORT_ERROR
    text = await _error(client, "describe_kernel", kernel=big)
    assert "at most 256 characters" in text and len(text) < SHORT_ERROR
    text = await _error(client, "compile_kernel", source=big * 1)  # 1 MB of "code"
    assert f"at most {MAX_CODE_CHARS} characters" in text
    text = await _error(client, "compile_kernel", kernel="vector_add", nvcc_flags=["-O3"] * 1000)
    assert "at most 64 items" in text
    # a lone surrogate (only an in-process client can send one) is refused, and recorded
    text = await _error(client, "list_kernels", hypothesis="a\ud800b")
    assert "hypothesis" in text
    # even a rejected call is on record, clipped: no 1 MB row, no 1 MB hypothesis column
    rows = server.state.ledger.query(limit=5)
    assert all(len(json.dumps(r["arguments"])) <= MAX_STORED_ARGUMENTS_CHARS for r in rows)
    assert all(r["hypothesis"] is None or len(r["hypothesis"]) <= MAX_TEXT_CHARS for r in rows)
    assert all(len(r["error"]) <= MAX_ERROR_CHARS for r in rows)
    await _still_serving(client)


async def test_non_finite_and_huge_numbers_are_refused(client, server):
    # JSON's Infinity/NaN cannot cross the in-memory client (it sends them as null), so
    # the models are checked directly; stdio's raw-bytes test sends the literals.
    tools = server.tools
    for tool, args in [
        ("microbench", {"kernel": "vector_add", "budget_ms": float("inf")}),
        ("microbench", {"kernel": "vector_add", "flops_per_call": float("nan")}),
        ("check_numerics", {"kernel": "rmsnorm", "tolerance": float("inf")}),
        ("check_numerics", {"kernel": "rmsnorm", "shapes": [{"M": 4, "N": float("inf")}]}),
        ("compile_kernel", {"kernel": "vector_add", "constexprs": {"BLOCK": float("nan")}}),
    ]:
        with pytest.raises(ValueError, match="finite|valid"):
            tools[tool].input_model.model_validate(args)
    text = await _error(client, "microbench", kernel="vector_add", budget_ms=1e308)
    assert "less than or equal" in text and len(text) < SHORT_ERROR
    text = await _error(client, "check_numerics", kernel="rmsnorm", shapes=[{"M": 10**30, "N": 64}])
    assert len(text) < SHORT_ERROR
    await _still_serving(client)


async def test_deep_nesting_is_refused(client):
    deep: list = []
    for _ in range(50):
        deep = [deep]
    text = await _error(client, "compile_kernel", kernel="vector_add", nvcc_flags=deep)
    assert len(text) < SHORT_ERROR
    await _still_serving(client)


async def test_a_long_reply_is_cut_and_the_whole_is_an_artifact(client, server):
    ledger = server.state.ledger
    for i in range(150):  # rows with the longest hypothesis a call may carry: 150 x 2 KB > the cap
        eid = ledger.open(
            tool="describe_kernel",
            arguments={"kernel": "rmsnorm"},
            kernel="rmsnorm",
            hypothesis=f"{i:03d} " + "h" * (MAX_TEXT_CHARS - 4),
            git_commit=None,
            git_diff_sha256=None,
            device=None,
            device_fingerprint=None,
        )
        ledger.close_ok(eid, {"summary": "s" * 1000}, [])
    out = await call(
        client, "list_experiments", limit=500
    )  # the client checks it against the output schema
    assert len(json.dumps(out, ensure_ascii=False)) <= MAX_REPLY_CHARS
    assert "reply cut" in out["summary"] and "artifact://" in out["summary"]
    uri = next(a for a in out["artifacts"] if a.endswith("/reply.json"))
    full = json.loads((await client.read_resource(uri)).contents[0].text)
    assert len(full["experiments"]) == 150 and len(out["experiments"]) < 150
    assert full["experiments"][0]["hypothesis"].startswith("149 ")
    await _still_serving(client)


def _raise_from(filename: str, exc: str) -> BaseException:
    try:
        exec(compile(f"def boom():\n    raise {exc}\nboom()\n", filename, "exec"), {})
    except BaseException as caught:  # noqa: BLE001 - the test wants whatever it raised
        return caught
    raise AssertionError("did not raise")


def test_worker_frames_are_shown_only_when_the_fault_is_ours(tmp_path):
    harness_root = Path(harness.__file__).parent
    agent = str(tmp_path / "candidate.py")
    # the agent's code raised: its frames, no harness frame
    err = harness.describe_exception(_raise_from(agent, "ValueError('bad shape')"), [str(tmp_path)])
    assert "candidate.py" in err["traceback"] and str(harness_root) not in err["traceback"]
    # the harness refused the agent's job (bad entry, bad payload): the message alone
    err = harness.describe_exception(
        _raise_from(str(harness_root / "loader.py"), "ValueError('no entry f')"), [str(tmp_path)]
    )
    assert err["traceback"] == "" and err["message"] == "no entry f"
    # a bug of ours (a KeyError in the harness, no agent frame): our frames, and it says so
    err = harness.describe_exception(
        _raise_from(str(harness_root / "loader.py"), "KeyError('payload')"), [str(tmp_path)]
    )
    assert (
        str(harness_root / "loader.py") in err["traceback"]
        and "a bug in the server" in err["message"]
    )
    # the real harness frames of a real call (this test's own frames are not the agent's)
    try:
        harness._write_json(tmp_path / "nope" / "x.json", {})
    except OSError as exc:
        err = harness.describe_exception(exc, [str(tmp_path / "agent")])
    assert "harness.py" not in err["traceback"], traceback.format_exc()


async def test_deep_or_overflowing_expect_is_a_clean_answer_for_every_tool(client):
    """Issue 27 items 1-2: 30 unary minuses nest past the parser's bound (a clear refusal, no
    RecursionError); numbers that overflow (inf - inf is NaN) make the comparison inconclusive
    with a reason, and the answer still validates against the tool's output schema."""
    tools = (await client.list_tools()).tools
    assert len(tools) >= 13
    for tool in tools:
        for deep in ["-" * 30 + "1 > 0", "not " * 30 + "true", "-" * 400 + "1 > 0"]:
            text = await _error(client, tool.name, expect=[deep])
            assert "nests" in text and "limit is 20" in text and len(text) < SHORT_ERROR, (
                tool.name,
                text,
            )
    cheap = {
        "list_kernels": {},
        "list_serves": {},
        "list_experiments": {},
        "describe_kernel": {"kernel": "rmsnorm"},
        "device_info": {"measure_peaks": False},
    }
    schemas = {t.name: t.output_schema for t in tools}
    for name, args in cheap.items():
        result = await client.call_tool(
            name, {**args, "expect": ["1e308*10 - 1e308*10 == 0", "1e308*10 > 0"]}
        )
        assert not result.is_error, (name, result.content)
        out = result.structured_content
        jsonschema.validate(out, schemas[name])
        answer = out["hypothesis_answer"]
        assert answer["answer"] == "inconclusive", (name, answer)
        assert all(
            "not a finite number" in c["comparisons"][0]["reason"] for c in answer["conditions"]
        ), answer
    # a condition that fails whatever the result holds is refused before the call runs anything
    text = await _error(client, "launch_serve", engine="builtin", expect=["1/0 > 1"])
    assert "divides by zero" in text
    text = await _error(client, "list_serves", expect=["len(serves) / 0 > 1"])
    assert "divides by zero" in text
    assert (await call(client, "list_serves"))["serves"] == []
    await _still_serving(client)


async def test_a_path_outside_the_workspace_is_refused_by_its_text(client):
    """Issue 27 item 3: every path argument (path fields, a reference or baseline named by
    file:function, a model folder, a ShareGPT file) is checked against the workspace before
    the server looks at it on the host: /proc/1/root/... is refused by the rule, never opened
    (opening it fails with EACCES even for root, which used to surface as an internal error)."""
    host = "/proc/1/root/etc/passwd"
    calls = [
        ("check_numerics", {"kernel": "vector_add", "reference": host + ":f"}),
        (
            "check_numerics",
            {
                "source": "def f(x):\n    return x\n",
                "entry": "f",
                "reference": host + ":f",
                "shapes": [{"N": 8}],
                "args": [{"name": "x", "shape": ["N"]}],
            },
        ),
        ("check_numerics", {"kernel": "vector_add", "path": host, "entry": "f"}),
        ("microbench", {"kernel": "vector_add", "path": host, "entry": "f"}),
        ("microbench", {"kernel": "vector_add", "baseline_path": host, "baseline_entry": "f"}),
        ("compile_kernel", {"path": host}),
        (
            "launch_serve",
            {"engine": "command", "args": {"model": "/proc/1/root", "command": ["x"]}},
        ),
        (
            "serve_benchmark",
            {"engine": "command", "args": {"model": "/proc/1/root/etc", "command": ["x"]}},
        ),
        (
            "serve_benchmark",
            {"engine": "builtin", "workload": {"dataset": "sharegpt", "sharegpt_path": host}},
        ),
    ]
    for tool, args in calls:
        text = await _error(client, tool, **args)
        assert "outside the workspace" in text and "Permission denied" not in text, (tool, text)
    assert (await call(client, "list_serves"))["serves"] == []
    await _still_serving(client)


async def test_cancelled_calls_do_not_stay_running_in_the_ledger(client, server):
    """Issue 27 item 12: a call cancelled at once (the client sends notifications/cancelled)
    is closed in the ledger wherever the cancellation lands, never left `running`."""
    import anyio

    for i in range(40):
        with anyio.move_on_after(i * 0.002):
            await client.call_tool("describe_kernel", {"kernel": "rmsnorm"})
    await _still_serving(client)
    await anyio.sleep(0.5)  # cancellations still unwinding in the server
    rows = server.state.ledger.query(limit=100)
    running = [r["id"] for r in rows if r["status"] == "running"]
    assert running == [], running
    assert any(r["error"] == "cancelled by the client" for r in rows)


async def test_tool_errors_show_paths_as_the_sandbox_sees_them(client, workspace):
    """Issue 27 item 14: a traceback from the agent's code names its files as /jobs/... or
    /workspace/...; no error shows a host path of the server (the workspace, the state and
    jobs folders, the Python install, this package's source)."""
    import sys

    from infra_agent import tools

    source = "import json\ndef g(x, y, out=None):\n    return json.loads('{')\n"
    out = await call(client, "check_numerics", kernel="vector_add", source=source, entry="g")
    text = "\n".join(case["error"] for case in out["cases"])  # a raising candidate is a case error
    assert "candidate.py:3:12: JSONDecodeError" in text, text
    workload = "import json\ndef step():\n    return json.loads('{')\n"
    text += await _error(client, "profile", source=workload, entry="step")  # a workload's traceback
    assert re.search(r'File "/jobs/[^"]+", line 3, in step', text), text
    text += await _error(client, "compile_kernel", path=str(workspace.parent / "elsewhere.py"))
    assert "outside the workspace /workspace" in text
    hosts = {
        str(workspace),
        str(workspace.resolve()),
        sys.prefix,
        sys.base_prefix,
        str(Path(tools.__file__).resolve().parent.parent),
    }
    assert not [h for h in hosts if h in text], (hosts, text)
