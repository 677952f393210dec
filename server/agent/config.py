"""What an agent run is given (AgentConfig) and what it returns (RunResult)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .transcript import Totals


@dataclass
class AgentConfig:
    base_url: (
        str  # the API root, e.g. https://api.z.ai/api/paas/v4 (the loop appends /chat/completions)
    )
    model: str
    goal: str
    api_key_env: str | None = "OPENAI_API_KEY"  # only the name is recorded, never the value
    tools: list[str] | None = None  # offer only these tools (default: all)
    max_steps: int = 30  # model turns
    max_tokens_total: int = 1_000_000  # prompt + completion tokens over the run
    max_time_s: float = 4 * 3600.0  # wall clock of the whole run
    max_tool_calls: int = 200  # tool calls run over the run
    max_parallel_tool_calls: int = (
        8  # tool calls run per turn; more are answered "send them next turn"
    )
    max_completion_tokens: int | None = 8192  # sent as max_tokens per turn
    max_context_chars: int = (
        400_000  # about 100k tokens: older tool results are truncated beyond it
    )
    transcript_path: Path | None = None  # default <state>/agent-runs/<run id>.jsonl
    request_timeout_s: float = 300.0
    max_retries: int = 5
    backoff_s: float = 1.0
    extra_body: dict = field(default_factory=dict)  # provider-specific request fields
    # a goal naming one kernel gets the optimize_kernel prompt; False: the check ladder alone
    # (the eval asks for a diagnosis, not a speed-up)
    kernel_prompt: bool = True


@dataclass
class RunResult:
    run_id: str
    stop_reason: (
        str  # answered, max_steps, max_tokens_total, max_time_s, max_tool_calls, model_api_error
    )
    stop_detail: str
    final_answer: str | None
    totals: Totals
    wall_s: float
    transcript_path: Path
    summary: str


def new_run_id() -> str:
    return f"run-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{secrets.token_hex(2)}"
