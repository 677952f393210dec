"""The conversation as the chat-completions API sees it: reading the model's tool calls
(whatever shape they arrive in), the messages sent back, and keeping the whole within
the context window by truncating older tool results.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

TRUNCATED_MARK = "[truncated by infra-agent"
KEEP_HEAD_CHARS = (
    600  # of a truncated tool result: its summary and experiment id come first in our JSON
)
EXPERIMENT_ID = re.compile(r"\be\d{5,}-[0-9a-f]{4}\b")


@dataclass
class ToolCall:
    id: str
    name: str
    raw_arguments: str  # exactly what the model sent (for the transcript)
    arguments: dict | None  # parsed; None when `problem` is set
    problem: str | None = None  # why it cannot run as asked; sent back as the tool's error


def parse_tool_calls(message: dict, offered: set[str], step: int) -> list[ToolCall]:
    """The assistant message's tool calls, each either runnable or with the error the
    model will see. Never raises: a model's malformed output is the model's to fix."""
    calls: list[ToolCall] = []
    for index, item in enumerate(message.get("tool_calls") or []):
        function = item.get("function") if isinstance(item, dict) else None
        function = function if isinstance(function, dict) else {}
        call_id = (
            item.get("id")
            if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]
            else ""
        )
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        raw = function.get("arguments", "")
        raw_text = raw if isinstance(raw, str) else json.dumps(raw)
        arguments, problem = _parse_arguments(raw)
        if not name:
            problem = "the tool call has no function name; name one of the tools offered"
        elif name not in offered:
            problem = (
                f"unknown tool {name!r}; the tools you can call are: {', '.join(sorted(offered))}"
            )
        if not call_id or any(
            c.id == call_id for c in calls
        ):  # each tool message must answer exactly one id
            call_id = f"call_{step}_{index}"
        calls.append(
            ToolCall(
                id=call_id,
                name=name,
                raw_arguments=raw_text,
                arguments=None if problem else arguments,
                problem=problem,
            )
        )
    return calls


def text_of(content: object) -> str:
    """A message's content as text: some servers send a list of parts ({"type": "text", "text"})."""
    if isinstance(content, list):
        return "".join(
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return content if isinstance(content, str) else ""


def _parse_arguments(raw: object) -> tuple[dict | None, str | None]:
    if isinstance(raw, dict):  # some servers (e.g. older Ollama) send an object, not a JSON string
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # a call without arguments
    if not isinstance(raw, str):
        return None, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        shown = raw if len(raw) <= 300 else raw[:300] + "..."
        return None, (
            f"arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): {shown!r}. "
            "Resend the call with one JSON object that matches the tool's parameters schema."
        )
    if not isinstance(value, dict):
        return (
            None,
            f'arguments must be a JSON object, got {type(value).__name__}; send {{"name": value, ...}}',
        )
    return value, None


def assistant_echo(message: dict, calls: list[ToolCall]) -> dict:
    """The assistant turn as it goes back in the history: role, content and the tool
    calls with ids filled in. Malformed arguments go back as "{}" (the error text quotes
    them): chat templates that parse the history (vLLM's) fail on invalid JSON."""
    echo: dict = {"role": "assistant", "content": text_of(message.get("content"))}
    if calls:
        echo["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name or "unknown",
                    "arguments": json.dumps(c.arguments) if c.arguments is not None else "{}",
                },
            }
            for c in calls
        ]
    return echo


def tool_message(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def conversation_chars(messages: list[dict]) -> int:
    return len(json.dumps(messages, ensure_ascii=False))


def shrink(messages: list[dict], max_chars: int, keep_last: int) -> int:
    """Truncate the oldest tool results (never the newest `keep_last`, never one already
    truncated) until the conversation fits `max_chars`. Returns how many were cut."""
    tool_indices = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    candidates = tool_indices[:-keep_last] if keep_last else tool_indices
    size = conversation_chars(messages)
    cut = 0
    for i in candidates:
        if size <= max_chars:
            break
        content = messages[i].get("content") or ""
        if TRUNCATED_MARK in content or len(content) <= KEEP_HEAD_CHARS:
            continue
        messages[i] = {**messages[i], "content": truncated(content)}
        size = conversation_chars(messages)
        cut += 1
    return cut


def truncated(content: str) -> str:
    ids = EXPERIMENT_ID.findall(content)
    where = (
        f"; the full result is experiment {ids[0]} (compare_experiments / list_experiments)"
        if ids
        else ""
    )
    return (
        f"{content[:KEEP_HEAD_CHARS]}\n{TRUNCATED_MARK}: {len(content) - KEEP_HEAD_CHARS} of {len(content)} "
        f"characters dropped to keep the conversation within the model's context{where}]"
    )
