"""The agent loop: a model behind an OpenAI-compatible chat-completions API drives this
server's tools until it answers without a tool call or a budget ends the run.

One turn: fit the conversation into the context -> ask the model (tools offered with
tool_choice "auto") -> read its tool calls -> run the runnable ones concurrently through
the in-memory MCP client (the server an IDE reaches: same validation, sandbox, ledger;
each call names this run in its `_meta`, so the ledger links it) -> send every result back
as a `tool` message (structured output as JSON, errors as "error: " + the error text).
Whatever the model does wrong (malformed arguments, unknown tools, too many calls) is
answered in a tool message it can act on; only the API failing for good, or a budget,
stops the run.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from ..clients import openai_tools
from ..context import RUN_META_KEY
from .config import AgentConfig, RunResult, new_run_id
from .conversation import (
    EXPERIMENT_ID,
    ToolCall,
    assistant_echo,
    conversation_chars,
    parse_tool_calls,
    shrink,
    text_of,
    tool_message,
)
from .model_client import ChatClient, ContextTooLong, ModelAPIError
from .prompt import system_prompt
from .transcript import CallRecord, Totals, Transcript, summary_text

TEXT_TOOL_CALL = re.compile(r"<tool_call>|<\|tool_call|\"tool_calls\"\s*:")
TEXT_TOOL_CALL_NOTE = (
    "Your last message wrote a tool call as text, so nothing ran. Call tools through the API's "
    "function calling (tool_calls), or answer without a tool call to end the run."
)
LAST_TURN_NOTE = (
    "This is your last turn within the run's budget: answer now, without a tool call, with what you "
    "tried (experiment ids), what each answered, and your conclusion."
)


class _Stop(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


async def run_agent(server, config: AgentConfig, api_key: str | None = None) -> RunResult:
    """Run one agent session over `server` (an InfraAgentServer). `api_key` is sent as a
    bearer token and is kept out of every file the run writes."""
    run = AgentRun(server, config, api_key)
    return await run.run()


class AgentRun:
    def __init__(self, server, config: AgentConfig, api_key: str | None):
        self.server, self.config = server, config
        self.run_id = new_run_id()
        self.chat = ChatClient(
            config.base_url,
            config.model,
            api_key,
            timeout_s=config.request_timeout_s,
            max_retries=config.max_retries,
            backoff_s=config.backoff_s,
            extra_body=dict(config.extra_body),
        )
        path = (
            config.transcript_path
            or server.state.workspace.state_dir / "agent-runs" / f"{self.run_id}.jsonl"
        )
        self.transcript = Transcript(Path(path), self.chat.redact)
        self.totals = Totals()
        self.messages: list[dict] = []
        self.context_limit = config.max_context_chars
        self.nudged = False  # told once that a tool call came as text
        self.turns_refused_for_budget = (
            0  # consecutive turns whose calls were all refused: tool budget spent
        )

    async def run(self) -> RunResult:
        started = time.monotonic()
        self.deadline = started + self.config.max_time_s
        stop, final = _Stop("cancelled", "the run was interrupted"), None
        try:
            async with Client(self.server) as self.mcp:
                stop, final = await self._session()
        except Exception as exc:  # a bug: still leave a transcript that says so
            stop = _Stop("failed", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            result = self._finish(stop, final, time.monotonic() - started)
            await self.chat.aclose()
        if stop.reason == "bad_tools":
            raise ValueError(stop.detail)
        return result

    async def _session(self) -> tuple[_Stop, str | None]:
        """Inside the MCP session, whose task group would wrap a raised stop in an ExceptionGroup."""
        try:
            await self._setup()
            final = await self._loop()
        except _Stop as budget_or_api:
            return budget_or_api, None
        return _Stop("answered", "the model answered without a tool call"), final

    async def _setup(self) -> None:
        listed = (await self.mcp.list_tools()).tools
        if self.config.tools:
            unknown = sorted(set(self.config.tools) - {t.name for t in listed})
            if unknown:
                raise _Stop(
                    "bad_tools",
                    f"unknown tool(s) {', '.join(unknown)}; this server has "
                    f"{', '.join(sorted(t.name for t in listed))}",
                )
            listed = [t for t in listed if t.name in self.config.tools]
        self.tools = openai_tools(
            listed
        )  # the same conversion as `infra-agent export-tools --format openai`
        self.offered = {t.name for t in listed}
        c = self.config
        budget = (
            f"{c.max_steps} turns, {c.max_tool_calls} tool calls (at most {c.max_parallel_tool_calls} per turn), "
            f"{c.max_tokens_total} tokens, {c.max_time_s / 60:.0f} minutes"
        )
        kernels = sorted(self.server.state.workspace.kernels) if c.kernel_prompt else []
        prompt = await system_prompt(self.mcp, c.goal, self.offered, kernels, budget)
        self.transcript.event(
            "run_start",
            run_id=self.run_id,
            model=c.model,
            base_url=c.base_url,
            api_key_env=c.api_key_env,
            goal=c.goal,
            tools=sorted(self.offered),
            budget={
                k: getattr(c, k)
                for k in (
                    "max_steps",
                    "max_tokens_total",
                    "max_time_s",
                    "max_tool_calls",
                    "max_parallel_tool_calls",
                )
            },
            workspace=str(self.server.state.workspace.root),
        )
        for message in ({"role": "system", "content": prompt}, {"role": "user", "content": c.goal}):
            self._append(message)

    async def _loop(self) -> str:
        """Turns until the model answers without a tool call; returns that answer."""
        while True:
            self._check_budget()
            self.totals.steps += 1
            step = self.totals.steps
            if step == self.config.max_steps and step > 1:
                self._append({"role": "user", "content": LAST_TURN_NOTE})
            completion = await self._ask_model(step)
            calls = parse_tool_calls(completion.message, self.offered, step)
            self._append(assistant_echo(completion.message, calls), record=False)
            content = text_of(completion.message.get("content"))
            if not calls and TEXT_TOOL_CALL.search(content) and not self.nudged:
                # Seen from GLM behind some hosts: the call arrives as markup in the text. Say so once.
                self.nudged = True
                self._append({"role": "user", "content": TEXT_TOOL_CALL_NOTE})
                continue
            if not calls:
                return content
            await self._run_tools(step, calls)

    def _check_budget(self) -> None:
        c, t = self.config, self.totals
        if t.steps >= c.max_steps:
            raise _Stop("max_steps", f"{c.max_steps} model turns spent")
        if t.tokens >= c.max_tokens_total:
            raise _Stop("max_tokens_total", f"{t.tokens} of {c.max_tokens_total} tokens spent")
        if time.monotonic() >= self.deadline:
            raise _Stop("max_time_s", f"{c.max_time_s:.0f} s wall-clock budget spent")
        if (
            self.turns_refused_for_budget >= 2
        ):  # told the tool budget was spent, the model still only calls tools
            raise _Stop("max_tool_calls", f"{c.max_tool_calls} tool calls spent")

    async def _ask_model(self, step: int):
        """One completion; on "context too long", truncate older tool results and retry."""
        while True:
            self._fit_context(step)
            remaining = self.config.max_tokens_total - self.totals.tokens
            max_tokens = min(self.config.max_completion_tokens or remaining, remaining)
            try:
                completion = await self.chat.complete(
                    self.messages,
                    self.tools,
                    max_tokens=max_tokens,
                    deadline=self.deadline,
                    on_failure=lambda f: self._api_failure(step, f),
                )
            except ContextTooLong as exc:
                before = conversation_chars(self.messages)
                self.context_limit = int(before * 0.6)
                if not shrink(self.messages, self.context_limit, keep_last=0):
                    raise _Stop(
                        "model_api_error", f"{exc}, and no older tool result is left to truncate"
                    ) from None
                self.transcript.event(
                    "context_truncated",
                    step=step,
                    why=str(exc),
                    chars_before=before,
                    chars_after=conversation_chars(self.messages),
                )
                continue
            except ModelAPIError as exc:
                raise _Stop("model_api_error", str(exc)) from None
            self._count(step, completion)
            return completion

    def _fit_context(self, step: int) -> None:
        before = conversation_chars(self.messages)
        if before <= self.context_limit:
            return
        last_turn = max(
            (i for i, m in enumerate(self.messages) if m.get("role") == "assistant"), default=0
        )
        newest = (
            len(self.messages) - last_turn - 1
        )  # the latest turn's results, kept whole while others can go
        cut = shrink(self.messages, self.context_limit, keep_last=newest) or shrink(
            self.messages, self.context_limit, keep_last=0
        )
        self.transcript.event(
            "context_truncated",
            step=step,
            num_truncated=cut,
            chars_before=before,
            chars_after=conversation_chars(self.messages),
            limit_chars=self.context_limit,
        )

    def _api_failure(self, step: int, failure: dict) -> None:
        self.totals.model_retries += failure["will_retry"]
        self.transcript.event("model_api_failure", step=step, **failure)

    def _count(self, step: int, completion) -> None:
        t = self.totals
        t.prompt_tokens += completion.prompt_tokens
        t.completion_tokens += completion.completion_tokens
        t.usage_estimated |= completion.usage_estimated
        t.model_calls += 1
        self.transcript.event(
            "model_response",
            step=step,
            message=completion.message,
            finish_reason=completion.finish_reason,
            usage={
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
                "estimated": completion.usage_estimated,
            },
            latency_s=round(completion.latency_s, 3),
            totals_tokens=t.tokens,
        )

    async def _run_tools(self, step: int, calls: list[ToolCall]) -> None:
        """Every call gets exactly one tool message (the API requires it), in call order."""
        records = [CallRecord(step, c.name, c.raw_arguments, "not_run", "") for c in calls]
        contents: dict[int, str] = {}
        runnable: list[int] = []
        for i, call in enumerate(calls):
            refusal = call.problem or self._over_budget(len(runnable))
            if refusal:
                contents[i] = records[i].answer = f"error: {refusal}"
                self._log_call(step, call, records[i], contents[i], 0.0)
            else:
                runnable.append(i)
        with anyio.move_on_after(max(0.0, self.deadline - time.monotonic())):
            async with anyio.create_task_group() as group:
                for i in runnable:
                    group.start_soon(self._call_tool, step, calls[i], records[i], contents, i)
        for i in runnable:
            if i not in contents:  # cancelled by the time budget
                records[i].status = "cancelled"
                contents[i] = records[i].answer = (
                    "error: not finished: the run's time budget ended during this call"
                )
                self._log_call(step, calls[i], records[i], contents[i], 0.0)
        self.totals.calls.extend(records)
        spent = not runnable and self.totals.num_tool_calls_run >= self.config.max_tool_calls
        self.turns_refused_for_budget = self.turns_refused_for_budget + 1 if spent else 0
        for i, call in enumerate(calls):
            self._append(tool_message(call.id, contents[i]), record=False)

    def _over_budget(self, num_runnable_this_turn: int) -> str | None:
        c = self.config
        if self.totals.num_tool_calls_run + num_runnable_this_turn >= c.max_tool_calls:
            return f"not run: this run's budget of {c.max_tool_calls} tool calls is spent; answer with what you have"
        if num_runnable_this_turn >= c.max_parallel_tool_calls:
            return f"not run: at most {c.max_parallel_tool_calls} tool calls run per turn; send this one next turn"
        return None

    async def _call_tool(
        self, step: int, call: ToolCall, record: CallRecord, contents: dict, index: int
    ) -> None:
        started = time.monotonic()
        link = {"run_id": self.run_id, "step": step, "model": self.config.model}
        meta: Any = {RUN_META_KEY: link}  # our key beside the SDK's (not in its TypedDict)
        try:
            result = await self.mcp.call_tool(call.name, call.arguments, meta=meta)
        except (
            Exception
        ) as exc:  # the MCP layer itself failed (not the tool): still an answer for the model
            content = (
                f"error: the call did not reach the tool ({type(exc).__name__}: {exc}); retry once"
            )
            record.status, record.answer = "error", content
        else:
            content = _result_content(result)
            record.status = "error" if result.is_error else "ok"
            structured = (
                result.structured_content if isinstance(result.structured_content, dict) else {}
            )
            record.answer = str(structured.get("summary") or content)
            found = EXPERIMENT_ID.search(str(structured.get("experiment_id") or content))
            record.experiment_id = found.group(0) if found else None
        contents[index] = content
        self._log_call(step, call, record, content, time.monotonic() - started)

    def _log_call(
        self, step: int, call: ToolCall, record: CallRecord, content: str, duration_s: float
    ) -> None:
        self.transcript.event(
            "tool_call",
            step=step,
            call_id=call.id,
            name=call.name,
            arguments=call.raw_arguments,
            status=record.status,
            experiment_id=record.experiment_id,
            result=content,
            duration_s=round(duration_s, 3),
        )

    def _append(self, message: dict, record: bool = True) -> None:
        self.messages.append(message)
        if record:
            self.transcript.event("message", message=message)

    def _finish(self, stop: _Stop, final: str | None, wall_s: float) -> RunResult:
        summary = summary_text(
            run_id=self.run_id,
            model=self.config.model,
            goal=self.config.goal,
            stop_reason=stop.reason,
            stop_detail=stop.detail,
            final_answer=final,
            totals=self.totals,
            wall_s=wall_s,
            transcript=self.transcript.path,
        )
        self.transcript.event("stop", reason=stop.reason, detail=stop.detail, final_answer=final)
        self.transcript.event(
            "summary",
            text=summary,
            tokens=self.totals.tokens,
            prompt_tokens=self.totals.prompt_tokens,
            completion_tokens=self.totals.completion_tokens,
            steps=self.totals.steps,
            tool_calls=len(self.totals.calls),
            wall_s=round(wall_s, 3),
        )
        self.transcript.close()
        return RunResult(
            self.run_id,
            stop.reason,
            stop.detail,
            final,
            self.totals,
            wall_s,
            self.transcript.path,
            self.chat.redact(summary),
        )


def _result_content(result) -> str:
    """Structured output as compact JSON; an error as "error: " + its text."""
    text = " ".join(getattr(c, "text", "") for c in result.content).strip()
    if result.is_error:
        return f"error: {text}"
    if result.structured_content is not None:
        return json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False)
    return text
