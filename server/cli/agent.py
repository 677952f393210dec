"""`infra-agent agent`: the option declarations; server/agent/command.py runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..agent.cli_options import BaseUrlOpt, ModelOpt
from .common import AllowUnsandboxedOpt, WorkspaceOpt, build, fail


def agent(
    base_url: BaseUrlOpt,
    model: ModelOpt,
    goal: Annotated[
        str, typer.Option(help="What the agent should achieve, in one or two sentences.")
    ],
    workspace: WorkspaceOpt = None,
    api_key_env: Annotated[
        str,
        typer.Option(
            help="Environment variable holding the API key (sent as a bearer "
            "token; never written anywhere)."
        ),
    ] = "OPENAI_API_KEY",
    max_steps: Annotated[int, typer.Option(min=1, help="Most model turns.")] = 30,
    max_tokens_total: Annotated[
        int, typer.Option(min=1, help="Most prompt + completion tokens.")
    ] = 1_000_000,
    max_time_s: Annotated[
        float, typer.Option(min=1, help="Wall-clock budget of the run, seconds.")
    ] = 4 * 3600.0,
    max_tool_calls: Annotated[int, typer.Option(min=1, help="Most tool calls run.")] = 200,
    tools: Annotated[
        Optional[str], typer.Option(help="Offer only these tools (comma-separated).")
    ] = None,
    transcript: Annotated[
        Optional[Path],
        typer.Option(
            help="Transcript file (JSONL); default <workspace state>/agent-runs/<run id>.jsonl."
        ),
    ] = None,
    extra_body: Annotated[
        Optional[str],
        typer.Option(
            help='Provider fields merged into each request, as JSON, e.g. \'{"thinking": {"type": "disabled"}}\'.'
        ),
    ] = None,
    max_retries: Annotated[
        int, typer.Option(min=0, help="Retries of a busy or failing model API per turn.")
    ] = 5,
    max_completion_tokens: Annotated[
        int, typer.Option(min=1, help="max_tokens of each model turn.")
    ] = 8192,
    max_context_chars: Annotated[
        int,
        typer.Option(
            min=1000,
            help="Conversation size (characters, ~4 per token) beyond which older tool results are "
            "truncated; set it below the model's context window.",
        ),
    ] = 400_000,
    allow_unsandboxed: AllowUnsandboxedOpt = False,
) -> None:
    """Let a model behind an OpenAI-compatible API drive the tools itself, until it answers or a budget ends.

    Exit codes: 0 the model answered, 3 a budget ended the run, 1 the model API failed, 2 bad command line."""
    from ..agent.command import run_from_command_line

    options: dict[str, Any] = dict(
        base_url=base_url,
        model=model,
        goal=goal,
        api_key_env=api_key_env,
        max_steps=max_steps,
        max_tokens_total=max_tokens_total,
        max_time_s=max_time_s,
        max_tool_calls=max_tool_calls,
        tools=tools,
        transcript=transcript,
        extra_body=extra_body,
        max_retries=max_retries,
        max_completion_tokens=max_completion_tokens,
        max_context_chars=max_context_chars,
    )
    try:
        code = run_from_command_line(lambda: build(workspace, allow_unsandboxed), **options)
    except (
        ValueError
    ) as exc:  # bad --extra-body, or --tools naming a tool this server does not have
        raise fail(str(exc)) from None
    raise typer.Exit(code)
