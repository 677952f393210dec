"""The `infra-agent` CLI, in-process (typer's runner): call, tools, experiments, config,
export-tools, and clear failures with non-zero exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from infra_agent.kernels.workspace import load_workspace
from infra_agent.server.cli import app, parse_arguments

runner = CliRunner(env={"COLUMNS": "200"})  # wide enough that table cells do not wrap


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_parse_arguments_json_and_key_value():
    assert parse_arguments(['{"kernel": "rmsnorm", "limit": 3}']) == {
        "kernel": "rmsnorm",
        "limit": 3,
    }
    assert parse_arguments(
        ["kernel=rmsnorm", "limit=3", "include_source=false", 'shape={"M": 4}']
    ) == {"kernel": "rmsnorm", "limit": 3, "include_source": False, "shape": {"M": 4}}
    with pytest.raises(ValueError, match="key=value"):
        parse_arguments(["rmsnorm"])
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_arguments(["{kernel: rmsnorm}"])


def test_call_prints_a_table_or_json_and_records_the_experiment(workspace):
    human = invoke(
        "call", "describe_kernel", "kernel=rmsnorm", "include_source=false", "-w", str(workspace)
    )
    assert human.exit_code == 0, human.output
    assert (
        "describe_kernel" in human.stdout
        and "tolerances" in human.stdout
        and "fp32" in human.stdout
    )

    as_json = invoke("call", "list_kernels", "--json", "-w", str(workspace))
    assert as_json.exit_code == 0
    data = json.loads(as_json.stdout)
    assert [k["name"] for k in data["kernels"]] == sorted(load_workspace(workspace).kernels)

    listed = invoke("experiments", "--json", "-w", str(workspace))
    rows = json.loads(listed.stdout)
    assert [r["tool"] for r in rows] == ["list_kernels", "describe_kernel"]
    assert rows[0]["id"] == data["experiment_id"]
    table = invoke("experiments", "--tool", "describe_kernel", "-w", str(workspace))
    assert (
        table.exit_code == 0
        and "describe_kernel" in table.stdout
        and "list_kernels" not in table.stdout
    )


def test_bad_input_exits_non_zero_with_a_clear_message(workspace, tmp_path):
    unknown = invoke("call", "describe_kernel", "kernel=nope", "-w", str(workspace))
    assert unknown.exit_code == 3 and "unknown kernel 'nope'" in unknown.stderr  # a tool error
    assert "[experiment e" in unknown.stderr  # the failed call is on record, and says where

    malformed = invoke("call", "describe_kernel", "{not json", "-w", str(workspace))
    assert malformed.exit_code == 2 and "not valid JSON" in malformed.stderr
    extra = invoke("call", "describe_kernel", "kernel=rmsnorm", "colour=blue", "-w", str(workspace))
    assert extra.exit_code == 2 and "unknown argument 'colour'" in extra.stderr  # a usage error
    no_tool = invoke("call", "no_such_tool", "-w", str(workspace))
    assert no_tool.exit_code == 2 and "no_such_tool" in no_tool.stderr

    missing = tmp_path / "does-not-exist"
    for command in (
        ["tools"],
        ["call", "list_kernels"],
        ["serve"],
        ["experiments"],
        ["config", "--client", "cursor"],
    ):
        result = invoke(*command, "-w", str(missing))
        assert result.exit_code == 2, command
        assert "does not exist" in result.stderr and result.stdout == ""


def test_exit_codes_say_whether_the_answer_holds(workspace):
    """0 the answer holds, 1 contradicted, 2 usage error (nothing ran), 3 tool error; a single
    value for a list field (expect here) is a one-item list, as a person typing it means."""
    supported = invoke("call", "list_kernels", "expect=len(kernels) >= 1", "-w", str(workspace))
    assert supported.exit_code == 0, supported.output
    assert "supported" in supported.stdout
    contradicted = invoke(
        "call", "list_kernels", "expect=len(kernels) > 1000", "--json", "-w", str(workspace)
    )
    assert contradicted.exit_code == 1
    assert json.loads(contradicted.stdout)["hypothesis_answer"]["answer"] == "contradicted"
    bad_expect = invoke("call", "list_kernels", "expect=len(kernel) > 1", "-w", str(workspace))
    assert bad_expect.exit_code == 2 and "len(kernel)" in bad_expect.stderr
    tool_error = invoke("call", "describe_kernel", "kernel=nope", "-w", str(workspace))
    assert tool_error.exit_code == 3
    assert "Exit codes" in invoke("call", "--help").stdout


def test_a_failing_verdict_exits_1_and_dtypes_takes_one_value(workspace):
    """check_numerics of a wrong kernel, dtypes=float32 typed as one word: verdict fail, exit 1."""
    wrong = "def add(x, y):\n    return x - y\n"
    result = invoke(
        "call",
        "check_numerics",
        "kernel=vector_add",
        f"source={json.dumps(wrong)}",
        "entry=add",
        "dtypes=float32",
        "--json",
        "-w",
        str(workspace),
    )
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["verdict"] == "fail" and {c["dtype"] for c in data["cases"]} == {"float32"}


def test_errors_speak_the_terminal_not_mcp(workspace):
    extra = invoke("call", "describe_kernel", "kernel=rmsnorm", "colour=blue", "-w", str(workspace))
    assert "tools/list" not in extra.stderr and "infra-agent tools describe_kernel" in extra.stderr
    assert "Error executing tool" not in extra.stderr
    unknown = invoke("call", "describe_kernel", "kernel=nope", "-w", str(workspace))
    assert (
        "infra-agent call list_kernels" in unknown.stderr
        and "Call list_kernels" not in unknown.stderr
    )
    no_tool = invoke("call", "no_such_tool", "-w", str(workspace))
    assert "infra-agent tools" in no_tool.stderr and "microbench" in no_tool.stderr
    arguments = invoke("tools", "microbench", "-w", str(workspace))
    assert arguments.exit_code == 0
    for name in (
        "kernel",
        "baseline",
        "shapes",
        "budget_ms",
        "median_ms",
    ):  # its arguments and expect fields
        assert name in arguments.stdout


def test_tools_lists_one_line_each(workspace):
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        app, ["tools", "-w", str(workspace)], catch_exceptions=False
    )
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    names = [line.split()[0] for line in lines]
    for name in (
        "list_kernels",
        "describe_kernel",
        "device_info",
        "list_experiments",
        "compare_experiments",
    ):
        assert name in names
    assert len(names) == len(set(names)) == len(lines)  # one line per tool, none wrapped
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)


def test_export_tools_openai_validates(workspace):
    result = invoke("export-tools", "--format", "openai", "-w", str(workspace))
    assert result.exit_code == 0
    defs = json.loads(result.stdout)
    names = {d["function"]["name"] for d in defs}
    assert {"list_kernels", "describe_kernel", "device_info"} <= names
    for d in defs:
        assert d["type"] == "function" and set(d["function"]) == {
            "name",
            "description",
            "parameters",
        }
        params = d["function"]["parameters"]
        assert params["type"] == "object" and isinstance(params["properties"], dict)
        assert "$ref" not in json.dumps(
            params
        )  # references inlined for servers that do not resolve them
        jsonschema.Draft202012Validator.check_schema(params)
    describe = next(d for d in defs if d["function"]["name"] == "describe_kernel")["function"][
        "parameters"
    ]
    validator = jsonschema.Draft202012Validator(describe)
    assert validator.is_valid({"kernel": "rmsnorm"})
    assert not validator.is_valid({})  # kernel is required
    assert not validator.is_valid({"kernel": "rmsnorm", "bogus": 1})  # extra arguments are rejected


@pytest.mark.parametrize("client", ["claude-code", "cursor", "vscode"])
def test_config_snippets_use_this_install(client, workspace):
    result = invoke("config", "--client", client, "-w", str(workspace))
    assert result.exit_code == 0
    body = result.stdout[result.stdout.index("{") :]
    config = json.loads(body)
    servers = config["servers"] if client == "vscode" else config["mcpServers"]
    entry = servers["infra-agent"]
    assert Path(entry["command"]).is_absolute()
    assert Path(entry["command"]).parent == Path(sys.executable).parent
    assert entry["args"][-2:] == ["--workspace", str(workspace.resolve())]


def test_config_http_with_token():
    result = invoke(
        "config", "--client", "vscode", "--url", "http://127.0.0.1:8765/mcp", "--token", "s3cret"
    )
    config = json.loads(result.stdout[result.stdout.index("{") :])
    assert config["servers"]["infra-agent"] == {
        "type": "http",
        "url": "http://127.0.0.1:8765/mcp",
        "headers": {"Authorization": "Bearer s3cret"},
    }


def test_lock_pins_a_kernel_and_rejects_an_unknown_one(workspace):
    locked = invoke("lock", "rmsnorm", "-w", str(workspace))
    assert locked.exit_code == 0, locked.stderr
    entry = json.loads(locked.stdout)
    assert entry["reference"] == "reference.py:rmsnorm" and len(entry["reference_sha256"]) == 64
    unknown = invoke("lock", "nope", "-w", str(workspace))
    assert unknown.exit_code == 2 and "unknown kernel 'nope'" in unknown.stderr


def test_inline_refs_keeps_the_meaning_of_nested_schemas():
    from pydantic import BaseModel

    from infra_agent.server.clients import inline_refs

    class Shape(BaseModel):
        M: int
        N: int

    class Args(BaseModel):
        shapes: list[Shape]
        first: Shape | None = None

    original = Args.model_json_schema()
    inlined = inline_refs(original)
    assert "$defs" in original and "$ref" not in json.dumps(inlined)
    for instance, ok in (
        ({"shapes": [{"M": 1, "N": 2}]}, True),
        ({"shapes": [{"M": "x"}]}, False),
        ({"shapes": [], "first": {"M": 1, "N": 1}}, True),
        ({"shapes": [], "first": {}}, False),
    ):
        assert jsonschema.Draft202012Validator(original).is_valid(instance) is ok
        assert jsonschema.Draft202012Validator(inlined).is_valid(instance) is ok


def test_serve_http_on_a_busy_port_is_a_clear_error(workspace):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = invoke("serve", "--http", "--port", str(port), "-w", str(workspace))
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "serving" not in result.stderr  # nothing announced for a server that never came up


def test_the_top_level_help_names_both_loops_and_the_ledger():
    """The description says what the server does now, not only the first kernel tools."""
    text = " ".join(invoke("--help").stdout.split())
    for part in (
        "Kernel loop",
        "microbenchmark",
        "Serving loop",
        "launch, load-test and profile serving engines",
        "ledger",
    ):
        assert part in text, part


def test_call_prints_progress_on_stderr_as_it_comes(workspace):
    """A long call's progress notifications reach the terminal on stderr (stdout keeps the
    answer alone, parseable as JSON)."""
    result = invoke(
        "call", "compile_kernel", "kernel=rmsnorm", "target=sm_90a", "--json", "-w", str(workspace)
    )
    assert "compiling (" in result.stderr, result.stderr
    json.loads(result.stdout)  # the answer alone


def test_every_option_of_every_command_says_what_it_does():
    """A newcomer reads --help: no option of any command is listed without a help text."""
    import typer.main

    def walk(command, path: str):  # typer's own click: groups have `commands`
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    commands = list(walk(typer.main.get_command(app), "infra-agent"))
    assert len(commands) > 10  # the walk reached the subcommands
    bare = [
        f"{path} {param.opts[-1]}"
        for path, command in commands
        for param in command.params
        if param.param_type_name == "option" and param.name != "help" and not param.help
    ]
    assert not bare, bare
