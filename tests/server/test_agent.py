"""`infra-agent agent` against a scripted stand-in for a model: a real HTTP server on
loopback that speaks the chat-completions API and answers each request with the next
scripted reply, while the tools really run (sandbox, ledger) on a throwaway workspace.

The scripted sequence is a realistic session: the API is busy first (429 with
Retry-After, then a 503 whose body echoes the key), then describe_kernel,
compile_kernel, check_numerics with a candidate, a call with malformed JSON arguments,
two microbench calls in one turn, and a final answer."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import anyio
import pytest
from scripted_model import ScriptedModel, answer, failure, tool_turn
from typer.testing import CliRunner

from infra_agent.server.agent import AgentConfig, run_agent
from infra_agent.server.agent.loop import LAST_TURN_NOTE
from infra_agent.server.cli import app
from infra_agent.server.clients import openai_tools
from infra_agent.server.ledger import Ledger

CANDIDATE = "import torch\n\ndef vector_add(x, y):\n    return torch.add(x, y)\n"
FINAL_ANSWER = (
    "torch.add matches the reference (check_numerics PASS); see the microbench experiments."
)


@pytest.fixture
def scripted():
    models: list[ScriptedModel] = []

    def start(replies):
        models.append(ScriptedModel(replies))
        return models[-1]

    yield start
    for m in models:
        m.close()


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- the realistic session, through the CLI ----------------------------------------------------


def test_a_scripted_session_runs_every_tool_and_records_the_run(workspace, tmp_path, scripted):
    key = "sk-h5-" + secrets.token_hex(16)
    model = scripted(
        [
            failure(429, '{"error": {"message": "rate limited"}}', {"Retry-After": "1"}),
            failure(
                503, f'{{"error": "overloaded; your key {key} is fine"}}'
            ),  # a provider that echoes the key
            tool_turn(
                (
                    "describe_kernel",
                    {
                        "kernel": "vector_add",
                        "include_source": False,
                        "hypothesis": "vector_add is memory-bound",
                    },
                )
            ),
            tool_turn(("compile_kernel", {"kernel": "vector_add", "target": "sm_90a"})),
            tool_turn(
                (
                    "check_numerics",
                    {
                        "kernel": "vector_add",
                        "source": CANDIDATE,
                        "entry": "vector_add",
                        "shapes": [{"N": 1000}],
                        "dtypes": ["float32"],
                        "trials": 1,
                        "hypothesis": "torch.add computes the same sum",
                    },
                )
            ),
            tool_turn(
                ("microbench", '{"kernel": "vector_add", "shapes": [{"N": 1000}')
            ),  # cut-off JSON
            tool_turn(
                *[
                    (
                        "microbench",
                        {
                            "kernel": "vector_add",
                            "source": CANDIDATE,
                            "entry": "vector_add",
                            "shapes": [{"N": n}],
                            "budget_ms": 100,
                        },
                    )
                    for n in (1000, 4096)
                ]
            ),
            answer(FINAL_ANSWER),
        ]
    )
    transcript = tmp_path / "run.jsonl"

    async def exported():  # export-tools' conversion, of the tool list an MCP client receives
        from mcp import Client

        from infra_agent.server.app import build_server

        server = build_server(workspace)
        try:
            async with Client(server) as client:
                return openai_tools((await client.list_tools()).tools)
        finally:
            await server.aclose()

    expected_tools = anyio.run(exported)
    result = CliRunner().invoke(
        app,
        [
            "agent",
            "--base-url",
            model.url,
            "--model",
            "scripted-glm",
            "--api-key-env",
            "H5_TEST_KEY",
            "--goal",
            "check whether torch.add is a correct and fast vector_add",
            "-w",
            str(workspace),
            "--transcript",
            str(transcript),
            "--max-steps",
            "10",
        ],
        env={"H5_TEST_KEY": key},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    run_id = next(e for e in events(transcript) if e["event"] == "run_start")["run_id"]

    # What the API saw: the key as a bearer token, the exported tools, tool_choice auto.
    assert len(model.requests) == 8 and {r["path"] for r in model.requests} == {
        "/v1/chat/completions"
    }
    assert all(r["headers"]["Authorization"] == f"Bearer {key}" for r in model.requests)
    first = model.requests[0]["body"]
    assert first["model"] == "scripted-glm" and first["tool_choice"] == "auto"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert (
        "optimize_kernel" not in first["messages"][0]["content"]
    )  # the prompt's text, not its name
    assert (
        "vector_add" in first["messages"][0]["content"]
        and "compile_kernel" in first["messages"][0]["content"]
    )
    assert first["tools"] == expected_tools

    # Every tool really ran, linked to the run; the malformed call reached no tool.
    ledger = Ledger(workspace / ".infra-agent" / "ledger.sqlite")
    rows = list(reversed(ledger.query(run_id=run_id)))
    ledger.close()
    assert [(r["tool"], r["run_step"], r["status"]) for r in rows] == [
        ("describe_kernel", 1, "ok"),
        ("compile_kernel", 2, "ok"),
        ("check_numerics", 3, "ok"),
        ("microbench", 5, "ok"),
        ("microbench", 5, "ok"),
    ]
    assert {r["run_model"] for r in rows} == {"scripted-glm"}
    assert rows[2]["result"]["verdict"] == "pass"
    assert {r["arguments"]["shapes"][0]["N"] for r in rows[3:]} == {1000, 4096}
    assert max(r["started_at"] for r in rows[3:]) < min(
        r["ended_at"] for r in rows[3:]
    )  # dispatched together

    # The malformed call came back as a tool error, and the loop went on.
    malformed = model.tool_messages(6)
    assert len(malformed) == 1
    assert next(iter(malformed.values())).startswith("error: arguments are not valid JSON")
    parallel = model.tool_messages(7)
    assert len(parallel) == 2 and all(
        json.loads(c)["experiment_id"] in {r["id"] for r in rows} for c in parallel.values()
    )
    assert json.loads(next(iter(model.tool_messages(3).values())))["name"] == "vector_add"

    # The transcript holds every step; the summary names every experiment and the answer.
    log = events(transcript)
    kinds = [e["event"] for e in log]
    assert kinds[0] == "run_start" and kinds[-2:] == ["stop", "summary"]
    assert [e["step"] for e in log if e["event"] == "model_response"] == [1, 2, 3, 4, 5, 6]
    calls = [(e["step"], e["name"], e["status"]) for e in log if e["event"] == "tool_call"]
    assert [c[:2] for c in calls] == [
        (1, "describe_kernel"),
        (2, "compile_kernel"),
        (3, "check_numerics"),
        (4, "microbench"),
        (5, "microbench"),
        (5, "microbench"),
    ]
    assert calls[3][2] == "not_run" and all(c[2] == "ok" for c in calls[:3] + calls[4:])
    failures = [e for e in log if e["event"] == "model_api_failure"]
    assert [(f["status"], f["will_retry"]) for f in failures] == [(429, True), (503, True)]
    assert failures[0]["wait_s"] == 1.0  # the server's Retry-After, honoured
    usage = [e["usage"] for e in log if e["event"] == "model_response"]
    assert sum(u["prompt_tokens"] + u["completion_tokens"] for u in usage) == 5 * 1050 + 30 + 1200
    stop = next(e for e in log if e["event"] == "stop")
    assert stop["reason"] == "answered" and stop["final_answer"] == FINAL_ANSWER
    assert all(r["id"] in result.stdout for r in rows) and FINAL_ANSWER in result.stdout
    assert f"--run {run_id}" in result.stdout and "6480 tokens" in result.stdout

    # The key reached the API, and no file anywhere.
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert transcript in written and any(p.name == "ledger.sqlite" for p in written)
    leaks = [p for p in written if key.encode() in p.read_bytes()]
    assert leaks == [] and key not in result.output
    assert "[redacted]" in transcript.read_text()  # the echoed key was caught, not merely absent


# ---- budgets and misbehaviour -----------------------------------------------------------------


@pytest.mark.anyio
async def test_the_step_budget_stops_a_model_that_never_stops(server, workspace, scripted):
    model = scripted(
        [tool_turn(("list_kernels", {}), ("list_kernels", {}), ("rm_rf", {"path": "/"}))]
    )
    config = AgentConfig(
        base_url=model.url,
        model="loops-forever",
        goal="never finish",
        max_steps=3,
        max_parallel_tool_calls=1,
    )
    result = await run_agent(server, config)
    assert result.stop_reason == "max_steps" and result.final_answer is None
    assert len(model.requests) == 3 and result.totals.steps == 3
    assert model.requests[-1]["body"]["messages"][-1] == {"role": "user", "content": LAST_TURN_NOTE}
    answers = list(model.tool_messages(1).values())
    assert json.loads(answers[0])["experiment_id"]
    assert answers[1].startswith("error: not run: at most 1 tool calls run per turn")
    assert answers[2].startswith("error: unknown tool 'rm_rf'") and "list_kernels" in answers[2]
    assert [c.status for c in result.totals.calls] == ["ok", "not_run", "not_run"] * 3
    assert "final answer: none" in result.summary and "max_steps" in result.summary
    ledger_rows = server.state.ledger.query(run_id=result.run_id)
    assert [r["tool"] for r in ledger_rows] == ["list_kernels"] * 3
    assert events(result.transcript_path)[-2]["reason"] == "max_steps"


@pytest.mark.anyio
async def test_the_tool_call_and_token_budgets(server, scripted):
    model = scripted([tool_turn(("list_kernels", {}))])
    calls = await run_agent(
        server, AgentConfig(base_url=model.url, model="m", goal="g", max_tool_calls=1)
    )
    # Turn 1 runs its call; turn 2's is refused ("answer with what you have"); a model that
    # calls again after reading that ends the run.
    assert calls.stop_reason == "max_tool_calls" and len(model.requests) == 3
    assert next(iter(model.tool_messages(2).values())).startswith(
        "error: not run: this run's budget of 1 tool"
    )

    tokens = await run_agent(
        server, AgentConfig(base_url=model.url, model="m", goal="g", max_tokens_total=2000)
    )
    assert tokens.stop_reason == "max_tokens_total" and tokens.totals.tokens == 2100
    assert (
        model.requests[-1]["body"]["max_tokens"] == 2000 - 1050
    )  # a turn never asks for more than is left


@pytest.mark.anyio
async def test_a_failing_api_stops_the_run_clearly(server, scripted):
    busy = scripted([failure(503, "upstream overloaded")])
    result = await run_agent(
        server, AgentConfig(base_url=busy.url, model="m", goal="g", max_retries=2, backoff_s=0.01)
    )
    assert result.stop_reason == "model_api_error" and len(busy.requests) == 3
    assert "failed 3 times in a row" in result.stop_detail and "HTTP 503" in result.stop_detail
    failures = [e for e in events(result.transcript_path) if e["event"] == "model_api_failure"]
    assert [(f["status"], f["will_retry"]) for f in failures] == [
        (503, True),
        (503, True),
        (503, False),
    ]

    refused = scripted([failure(401, '{"error": "invalid api key"}')])
    result = await run_agent(
        server, AgentConfig(base_url=refused.url, model="m", goal="g"), api_key="sk-wrong-1234"
    )
    assert result.stop_reason == "model_api_error" and len(refused.requests) == 1
    assert "--api-key-env" in result.stop_detail

    late = scripted([failure(429, "slow down", {"Retry-After": "7200"})])
    result = await run_agent(
        server, AgentConfig(base_url=late.url, model="m", goal="g", max_time_s=60)
    )
    assert result.stop_reason == "model_api_error" and "time budget" in result.stop_detail
    assert len(late.requests) == 1  # it did not sleep two hours to find out


@pytest.mark.anyio
async def test_a_conversation_too_long_truncates_older_tool_results(server, scripted):
    def too_long_once(body, seen=[]):  # noqa: B006 (the list counts calls on purpose)
        seen.append(1)
        if len(seen) == 1:
            return (
                400,
                {},
                {"error": {"message": "This model's maximum context length is 4096 tokens."}},
            )
        return answer("done")(body)

    model = scripted(
        [
            tool_turn(("describe_kernel", {"kernel": "rmsnorm", "include_source": True})),
            tool_turn(("describe_kernel", {"kernel": "vector_add", "include_source": True})),
            too_long_once,
            too_long_once,
        ]
    )
    result = await run_agent(
        server, AgentConfig(base_url=model.url, model="m", goal="g", max_context_chars=9000)
    )
    assert result.stop_reason == "answered" and result.final_answer == "done"
    # Before turn 3, the older result was cut to fit; the newest was kept whole.
    older, newer = (
        model.requests[2]["body"]["messages"][3],
        model.requests[2]["body"]["messages"][5],
    )
    assert "[truncated by infra-agent" in older["content"] and "is experiment e" in older["content"]
    assert json.loads(newer["content"])["name"] == "vector_add"
    # The API still said "too long": the newest was truncated too, and the same turn retried.
    retried = model.requests[3]["body"]["messages"][5]["content"]
    assert "[truncated by infra-agent" in retried
    truncations = [e for e in events(result.transcript_path) if e["event"] == "context_truncated"]
    assert len(truncations) == 2 and "maximum context length" in truncations[1]["why"]


@pytest.mark.anyio
async def test_the_time_budget_cancels_a_long_tool_call(server, scripted):
    # Each call sleeps 4 s: 5 timed calls (microbench's minimum) cannot fit in the 8 s budget, however
    # fast the host (a plain torch.add converged to its target error in under 3 s on a quiet one).
    # The budget counts from the run's start: listing the tools and the first turn come out of it
    # too (beside three other xdist workers they once took over 3 s), so it leaves room for them.
    slow = {
        "kernel": "vector_add",
        "source": "import time\nimport torch\n\ndef vector_add(x, y):\n"
        "    time.sleep(4.0)\n    return torch.add(x, y)\n",
        "entry": "vector_add",
        "shapes": [{"N": 1000}],
        "budget_ms": 60_000,
    }
    model = scripted([tool_turn(("microbench", slow)), answer("never reached")])
    result = await run_agent(
        server, AgentConfig(base_url=model.url, model="m", goal="g", max_time_s=8)
    )
    assert result.stop_reason == "max_time_s" and len(model.requests) == 1
    assert [c.status for c in result.totals.calls] == ["cancelled"]
    [row] = server.state.ledger.query(run_id=result.run_id)
    assert row["status"] == "error" and "cancelled" in row["error"]  # the ledger says so too


@pytest.mark.anyio
async def test_a_tool_call_written_as_text_gets_one_note(server, scripted):
    model = scripted(
        [
            answer("<tool_call>list_kernels<arg_key>x</arg_key></tool_call>"),
            answer("<tool_call>list_kernels</tool_call>"),
            answer("unused"),
        ]
    )
    result = await run_agent(server, AgentConfig(base_url=model.url, model="m", goal="g"))
    assert (
        len(model.requests) == 2
        and "wrote a tool call as text" in model.requests[1]["body"]["messages"][-1]["content"]
    )
    assert (
        result.stop_reason == "answered"
        and result.final_answer == "<tool_call>list_kernels</tool_call>"
    )
    assert server.state.ledger.query(run_id=result.run_id) == []


def test_the_tools_option_offers_only_those_tools(workspace, scripted):
    model = scripted([answer("nothing to do")])
    runner = CliRunner()
    base = ["agent", "--base-url", model.url, "--model", "m", "--goal", "g", "-w", str(workspace)]
    bad = runner.invoke(app, [*base, "--tools", "describe_kernel,nope"], env={"OPENAI_API_KEY": ""})
    assert bad.exit_code == 2 and "unknown tool(s) nope" in bad.stderr and model.requests == []
    good = runner.invoke(
        app,
        [
            *base,
            "--tools",
            "list_kernels, describe_kernel",
            "--max-completion-tokens",
            "64",
            "--extra-body",
            '{"thinking": {"type": "disabled"}}',
        ],
        env={"OPENAI_API_KEY": ""},
    )
    assert good.exit_code == 0, good.output
    assert sorted(t["function"]["name"] for t in model.requests[0]["body"]["tools"]) == [
        "describe_kernel",
        "list_kernels",
    ]
    sent = model.requests[0]["body"]
    assert sent["max_tokens"] == 64 and sent["thinking"] == {
        "type": "disabled"
    }  # provider fields pass through
    assert (
        "Authorization" not in model.requests[0]["headers"]
    )  # no key set: no header, not "Bearer None"
