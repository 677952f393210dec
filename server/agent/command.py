"""`infra-agent agent`'s body: options -> AgentConfig, the key from the environment, one run,
the summary on stdout, an exit code (0 answered, 3 a budget ended the run, 1 the model API
failed). server/cli/agent.py keeps only the option declarations."""

from __future__ import annotations

import json
import os
import sys

import anyio
from rich.console import Console

from .config import AgentConfig
from .loop import run_agent


def run_from_command_line(
    build_server,
    *,
    base_url: str,
    model: str,
    goal: str,
    api_key_env: str,
    max_steps: int,
    max_tokens_total: int,
    max_time_s: float,
    max_tool_calls: int,
    tools: str | None,
    transcript,
    extra_body: str | None,
    max_retries: int,
    max_completion_tokens: int,
    max_context_chars: int,
) -> int:
    try:
        body = json.loads(extra_body) if extra_body else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"--extra-body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError("--extra-body must be a JSON object")
    api_key = os.environ.get(api_key_env) or None
    if api_key is None:
        Console(stderr=True).print(
            f"[yellow]note:[/] ${api_key_env} is not set: sending no Authorization header",
            highlight=False,
        )
    config = AgentConfig(
        base_url=base_url,
        model=model,
        goal=goal,
        api_key_env=api_key_env,
        tools=[t.strip() for t in tools.split(",") if t.strip()] if tools else None,
        max_steps=max_steps,
        max_tokens_total=max_tokens_total,
        max_time_s=max_time_s,
        max_tool_calls=max_tool_calls,
        transcript_path=transcript,
        max_retries=max_retries,
        max_completion_tokens=max_completion_tokens,
        max_context_chars=max_context_chars,
        extra_body=body,
    )
    result = anyio.run(_run, build_server(), config, api_key)
    sys.stdout.write(result.summary + "\n")
    if result.stop_reason == "model_api_error":
        return 1
    return 0 if result.stop_reason == "answered" else 3


async def _run(server, config, api_key):
    try:
        return await run_agent(server, config, api_key)
    finally:
        await server.aclose()
