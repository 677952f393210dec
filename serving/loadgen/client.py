"""One streamed request to an OpenAI-compatible server, timed chunk by chunk.

No engine-specific code: what differs between engines (which request fields they
accept, whether they send per-chunk usage) is in `Endpoint`, filled by an adapter.
The clock is `time.perf_counter`; every time is taken when a whole SSE message has
been read, before it is parsed further.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Literal

import httpx

from ..unix_http import UnixSocketTransport
from .datasets import BenchRequest, Tokenizer
from .metrics import RequestRecord

# An idle pooled connection is dropped after this long, s: below the servers' own keep-alive
# timeout (uvicorn's and vLLM's 5 s, httpx's default expiry too), so a request never goes out on
# a connection the server is closing at that moment ("Server disconnected without sending a
# response", or a broken pipe). Only while this process keeps up: the expiry starts when it has
# read a response, which on a loaded host lags the server's send by seconds (the built-in engine
# keeps idle connections 60 s for that reason: serving/engine/__main__.py KEEP_ALIVE_S).
KEEPALIVE_EXPIRY_S = 2.0


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # e.g. "http://127.0.0.1:8000" (with `uds`, only the host part is used)
    model: str
    api: Literal["completions", "chat"] = "completions"
    uds: str | None = None  # a UNIX socket that reaches the server (the sandbox bridge)
    extra_body: dict = field(
        default_factory=dict
    )  # fields this engine accepts, e.g. {"ignore_eos": True}
    continuous_usage: bool = (
        False  # ask for usage in every chunk (vLLM's stream_options.continuous_usage_stats)
    )
    api_key: str | None = None

    @property
    def path(self) -> str:
        return "/v1/completions" if self.api == "completions" else "/v1/chat/completions"

    def payload(self, req: BenchRequest) -> dict:
        body: dict = {
            "model": self.model,
            "max_tokens": req.max_tokens,
            "stream": True,
            "temperature": 0.0,
            "stream_options": {"include_usage": True},
        }
        if self.continuous_usage:
            body["stream_options"]["continuous_usage_stats"] = True
        if self.api == "completions":
            body["prompt"] = req.prompt
        else:
            body["messages"] = [{"role": "user", "content": req.prompt}]
        return {**body, **self.extra_body}

    def client(self, max_connections: int, timeout_s: float) -> httpx.AsyncClient:
        limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        )
        transport = UnixSocketTransport(self.uds, limits) if self.uds else None
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            headers=headers,
            limits=limits,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        )


def _content(choice: dict) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return (delta.get("content") or "") + (delta.get("reasoning_content") or "")


async def stream_one(
    client: httpx.AsyncClient,
    ep: Endpoint,
    req: BenchRequest,
    rec: RequestRecord,
    tokenizer: Tokenizer | None = None,
) -> RequestRecord:
    """Send `req`, fill `rec` with what arrived and when. Errors land in `rec.error`."""
    rec.prompt_tokens = req.prompt_tokens
    rec.sent_s = time.perf_counter()
    try:
        async with client.stream("POST", ep.path, json=ep.payload(req)) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode(errors="replace")
                rec.error = f"HTTP {resp.status_code}: {body[:300]}"
                return rec
            usage = await _read_events(resp, ep, rec)
    except (httpx.HTTPError, json.JSONDecodeError, ValueError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:300]
        return rec
    _count_output(rec, usage, tokenizer)
    if not rec.content_times_s:
        if rec.first_choice_s is not None and rec.output_tokens >= 1:
            # tokens that decode to no text (EOS at once, special or partial UTF-8 tokens): the request
            # succeeded; its TTFT falls back to vLLM's rule, the first chunk with choices, and is flagged
            rec.content_times_s, rec.content_tokens, rec.no_text = (
                [rec.first_choice_s],
                [None],
                True,
            )
        else:
            rec.error = "the stream ended without any generated tokens"
    return rec


async def _read_events(resp: httpx.Response, ep: Endpoint, rec: RequestRecord) -> dict | None:
    """Timestamp every SSE message; keep content chunks (and their token counts when the
    engine sends usage per chunk). Returns the last usage seen."""
    usage: dict | None = None
    last_completion_tokens = 0
    is_done = False
    # Read to the end of the body even after [DONE]: leaving the response early makes httpcore
    # close the connection (h11 has not seen the message end), so every request would pay a new
    # TCP connect (about 1.5-4 ms of TTFT on a 2-core host; measured in bench/loadgen_overhead.py).
    async for line in resp.aiter_lines():
        now = time.perf_counter()
        if is_done or not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            is_done = True
            continue
        msg = json.loads(data)
        chunk_usage = msg.get("usage")
        choices = msg.get("choices") or []
        if choices or rec.first_choice_s is None:
            # the end is the last chunk with choices (the finish reason), as vLLM's latency:
            # the usage-only chunk after it is no generated token
            rec.last_chunk_s = now
        if choices and rec.first_choice_s is None:
            rec.first_choice_s = now
        text = "".join(_content(c) for c in choices)
        if text:
            rec.content_times_s.append(now)
            rec.text += text
            tokens = None
            if chunk_usage and ep.continuous_usage:
                tokens = int(chunk_usage.get("completion_tokens", 0)) - last_completion_tokens
                last_completion_tokens += tokens
            rec.content_tokens.append(tokens)
        usage = chunk_usage or usage
    return usage


def _count_output(rec: RequestRecord, usage: dict | None, tokenizer: Tokenizer | None) -> None:
    """Output tokens from the engine's usage; else re-tokenised text; else chunks (flagged)."""
    if usage is not None and "completion_tokens" in usage:
        rec.output_tokens = int(usage["completion_tokens"])
        rec.usage_prompt_tokens = usage.get("prompt_tokens")
        rec.output_tokens_source = "usage"
    elif tokenizer is not None:
        rec.output_tokens = len(tokenizer.encode(rec.text))
        rec.output_tokens_source = "retokenized"
    else:
        rec.output_tokens = len(rec.content_times_s)
        rec.output_tokens_source = "chunks"
