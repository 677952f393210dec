"""What a run leaves behind: a JSONL transcript (one event per line, written as it
happens, so a killed run still has its history) and a readable summary at the end.

Events: run_start, message (system, user), model_response (with token usage and
latency), retry, tool_call (arguments as sent, result as returned, duration),
context_truncated, stop, summary. Every line passes through `redact` first: the API key
never reaches the file, even if a provider echoes it in an error.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


class Transcript:
    def __init__(self, path: Path, redact: Callable[[str], str]):
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._redact = redact
        self._file = self.path.open("a", encoding="utf-8")
        self._started = time.monotonic()

    def event(self, kind: str, **fields: Any) -> None:
        record = {
            "event": kind,
            "time": time.time(),
            "elapsed_s": round(time.monotonic() - self._started, 3),
            **fields,
        }
        self._file.write(self._redact(json.dumps(record, ensure_ascii=False, default=str)) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


@dataclass
class CallRecord:
    """One tool call as the summary tells it."""

    step: int
    name: str
    arguments: str
    status: str  # ok, error, not_run (malformed, unknown tool, over budget), cancelled
    answer: str  # the result's summary line, or the error text
    experiment_id: str | None = None


@dataclass
class Totals:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_estimated: bool = False
    model_calls: int = 0
    model_retries: int = 0
    steps: int = 0
    calls: list[CallRecord] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def num_tool_calls_run(self) -> int:
        return sum(1 for c in self.calls if c.status in ("ok", "error", "cancelled"))


def summary_text(
    *,
    run_id: str,
    model: str,
    goal: str,
    stop_reason: str,
    stop_detail: str,
    final_answer: str | None,
    totals: Totals,
    wall_s: float,
    transcript: Path | None,
) -> str:
    lines = [
        f"agent run {run_id} (model {model}): {stop_reason}"
        + (f" - {stop_detail}" if stop_detail else ""),
        f"goal: {goal}",
        f"tool calls ({len(totals.calls)}, {totals.num_tool_calls_run} ran):",
    ]
    for c in totals.calls:
        where = f" {c.experiment_id}" if c.experiment_id else ""
        lines.append(
            f"  step {c.step:>2}  {c.name or '?'} [{c.status}]{where}: {_one_line(c.answer, 160)}"
        )
    if not totals.calls:
        lines.append("  (none)")
    lines.append(
        "final answer:"
        if final_answer
        else "final answer: none (the run stopped before the model gave one)"
    )
    if final_answer:
        lines.extend(f"  {line}" for line in final_answer.strip().splitlines())
    est = " (estimated: the API sent no usage for some turns)" if totals.usage_estimated else ""
    lines.append(
        f"spent: {totals.steps} model turns, {totals.tokens} tokens ({totals.prompt_tokens} prompt + "
        f"{totals.completion_tokens} completion){est}, {totals.model_retries} API retries, "
        f"{wall_s:.1f} s wall"
    )
    lines.append(f"ledger: infra-agent experiments --run {run_id} (with the same --workspace)")
    if transcript is not None:
        lines.append(f"transcript: {transcript}")
    return "\n".join(lines)


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
