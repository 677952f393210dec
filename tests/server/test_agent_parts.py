"""The agent loop's pure parts: reading whatever tool calls a model sends, the history
sent back, truncating older tool results, Retry-After, and keeping the key out of text."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

from infra_agent.server.agent.conversation import (
    TRUNCATED_MARK,
    assistant_echo,
    conversation_chars,
    parse_tool_calls,
    shrink,
    tool_message,
)
from infra_agent.server.agent.model_client import ChatClient, _retry_after_s

OFFERED = {"describe_kernel", "list_kernels"}


def call(name, arguments, call_id="c1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_calls_in_every_shape_a_model_sends_them():
    message = {
        "tool_calls": [
            call("describe_kernel", '{"kernel": "rmsnorm"}'),
            call("describe_kernel", {"kernel": "vector_add"}, "c2"),  # an object, not a JSON string
            call("list_kernels", "", ""),  # no arguments, and no id
            call("describe_kernel", '{"kernel": "rmsnorm"', "c4"),  # cut off
            call("describe_kernel", '["rmsnorm"]', "c5"),  # JSON, but not an object
            call("rm_rf", "{}", "c6"),
            {"id": "c7", "function": {}},  # no name at all
            "garbage",
        ]
    }
    calls = parse_tool_calls(message, OFFERED, step=3)
    assert [c.arguments for c in calls[:3]] == [{"kernel": "rmsnorm"}, {"kernel": "vector_add"}, {}]
    assert calls[2].id == "call_3_2" and all(c.problem is None for c in calls[:3])
    assert (
        calls[3].problem.startswith("arguments are not valid JSON")
        and '\'{"kernel": "rmsnorm"\'' in calls[3].problem
        and calls[3].arguments is None
    )
    assert "must be a JSON object, got list" in calls[4].problem
    assert (
        calls[5].problem
        == "unknown tool 'rm_rf'; the tools you can call are: describe_kernel, list_kernels"
    )
    assert "no function name" in calls[6].problem and "no function name" in calls[7].problem
    assert len({c.id for c in calls}) == len(calls)
    twice = parse_tool_calls(
        {"tool_calls": [call("list_kernels", "{}", "same"), call("list_kernels", "{}", "same")]},
        OFFERED,
        step=1,
    )
    assert [c.id for c in twice] == ["same", "call_1_1"]  # each tool message answers exactly one id

    echo = assistant_echo({"content": None, "reasoning_content": "hidden"}, calls)
    assert echo["content"] == "" and "reasoning_content" not in echo
    sent = [tc["function"]["arguments"] for tc in echo["tool_calls"]]
    assert (
        sent[0] == '{"kernel": "rmsnorm"}' and sent[3] == "{}"
    )  # invalid JSON never goes back in the history
    assert all(isinstance(json.loads(a), dict) for a in sent)
    assert assistant_echo({"content": "done"}, []) == {"role": "assistant", "content": "done"}
    parts = {
        "content": [
            {"type": "text", "text": "do"},
            {"type": "text", "text": "ne"},
            {"type": "image"},
        ]
    }
    assert assistant_echo(parts, [])["content"] == "done"


def test_shrink_cuts_the_oldest_tool_results_first_and_points_at_the_ledger():
    big = json.dumps({"experiment_id": "e00007-ab12", "summary": "s", "data": "x" * 5000})
    messages = [
        {"role": "system", "content": "p"},
        {"role": "user", "content": "g"},
        tool_message("a", big),
        tool_message("b", big),
        tool_message("c", big),
    ]
    assert shrink(messages, max_chars=100_000, keep_last=1) == 0  # fits: nothing to do
    assert shrink(messages, max_chars=12_000, keep_last=1) == 1
    assert (
        TRUNCATED_MARK in messages[2]["content"]
        and "experiment e00007-ab12" in messages[2]["content"]
    )
    assert messages[3]["content"] == big and messages[4]["content"] == big
    assert shrink(messages, max_chars=1_000, keep_last=1) == 1  # the newest stays whole
    assert messages[4]["content"] == big and conversation_chars(messages) > 1_000
    assert shrink(messages, max_chars=1_000, keep_last=0) == 1  # unless nothing else is left
    assert (
        shrink(messages, max_chars=1_000, keep_last=0) == 0
    )  # already truncated ones stay as they are


def test_retry_after_seconds_or_http_date():
    assert (
        _retry_after_s("3") == 3.0 and _retry_after_s("0.5") == 0.5 and _retry_after_s(None) is None
    )
    soon = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=120), usegmt=True)
    assert 100 < _retry_after_s(soon) <= 121
    assert _retry_after_s("soon, maybe") is None and _retry_after_s("-4") == 0.0


def test_the_key_is_redacted_from_any_text():
    client = ChatClient("http://127.0.0.1:9/v1", "m", api_key="sk-secret-123456")
    assert client.redact("bad key sk-secret-123456 given") == "bad key [redacted] given"
    assert client.url == "http://127.0.0.1:9/v1/chat/completions"
    assert ChatClient("http://x/v1/", "m").redact("no key") == "no key"
