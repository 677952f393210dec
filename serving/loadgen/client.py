"""One streamed request to an OpenAI-compatible server, timed chunk by chunk.

No engine-specific code: what differs between engines (which request fields they
accept, whether they send per-chunk usage) is in `Endpoint`, filled by an adapter.
The clock is `time.perf_counter`; every time is taken when a whole SSE message has
been read, before it is parsed further.
"""

from __future__ import annotations

import contextvars
import json
import time
import typing
from dataclasses import dataclass, field
from typing import Literal

import httpcore
import httpx

from ..unix_http import PooledTransport, UnixBackend
from .datasets import BenchRequest, Tokenizer
from .metrics import RequestRecord

# An idle pooled connection is dropped after this long, s: below the servers' own keep-alive
# timeout (uvicorn's and vLLM's 5 s, httpx's default expiry too), so that a request seldom goes
# out on a connection the server is closing at that moment. Only while this process keeps up: the
# expiry starts when it has read a response, which on a loaded host lags the server's send by
# seconds (the built-in engine keeps idle connections 60 s for that reason:
# serving/tcp.py KEEP_ALIVE_S; vLLM is launched with the same). What still races is
# sent again, once, on a fresh connection (stream_one, `reconnected`).
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
        backend = UnixBackend(self.uds) if self.uds else httpcore.AnyIOBackend()
        transport = PooledTransport(_WitnessedBackend(backend), limits)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            headers=headers,
            limits=limits,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        )


# --- a connection's witness: was it reused, did any answer come --------------------------------


@dataclass
class _Exchange:
    """One request's try, as the connection it went out on saw it."""

    fresh_only: bool = False  # a second try: on a connection that never carried a response
    reused: bool | None = None  # the connection had carried a response before (None: not sent yet)
    received: int = 0  # bytes that came back on it for this request


# The request being sent in this task (stream_one sets it; httpx sends and reads in the caller's task)
_EXCHANGE: contextvars.ContextVar[_Exchange | None] = contextvars.ContextVar(
    "loadgen_exchange", default=None
)


class _WitnessedStream(httpcore.AsyncNetworkStream):
    """A pooled connection that tells the request sent on it (`_EXCHANGE`) whether it had carried
    a response before and how many bytes of the answer came back."""

    def __init__(self, inner: httpcore.AsyncNetworkStream):
        self._inner = inner
        self._bytes_read = 0

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        exchange = _EXCHANGE.get()
        if exchange is not None and exchange.reused is None:
            reused = self._bytes_read > 0
            if reused and exchange.fresh_only:
                # nothing written: the pool closes this connection and tries another (a new one
                # once the idle ones are gone), as when a connection it chose went away
                raise httpcore.ConnectionNotAvailable()
            exchange.reused = reused
        await self._inner.write(buffer, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = await self._inner.read(max_bytes, timeout)
        self._bytes_read += len(data)
        exchange = _EXCHANGE.get()
        if exchange is not None:
            exchange.received += len(data)
        return data

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context, server_hostname=None, timeout=None
    ) -> httpcore.AsyncNetworkStream:
        return _WitnessedStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _WitnessedBackend(httpcore.AsyncNetworkBackend):
    """`inner`'s connections, each with its witness."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend):
        self._inner = inner

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _WitnessedStream(
            await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _WitnessedStream(
            await self._inner.connect_unix_socket(path, timeout, socket_options)
        )

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _closed_unanswered(exc: BaseException, exchange: _Exchange) -> bool:
    """Whether a request failed as one sent on an idle connection the server was closing: on a
    reused connection, closed (end of stream, reset, broken pipe) before any byte of an answer.
    A server closes an idle keep-alive connection only while no request has arrived on it, so the
    engine never saw this one: it is sent again, once, on a fresh connection, as Go's net/http
    does (a timeout, or a fresh connection closed, is the engine's answer and stays a failure)."""
    return (
        not exchange.fresh_only
        and exchange.reused is True
        and exchange.received == 0
        and isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError))
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
    """Send `req`, fill `rec` with what arrived and when. Errors land in `rec.error`. A request
    that the server closed its reused connection under, unanswered, goes out once more on a fresh
    connection (`rec.reconnected`; its latencies still start at the first send)."""
    rec.prompt_tokens = req.prompt_tokens
    rec.sent_s = time.perf_counter()
    exchange = _Exchange()
    while True:
        token = _EXCHANGE.set(exchange)
        try:
            async with client.stream("POST", ep.path, json=ep.payload(req)) as resp:
                if resp.status_code != 200:
                    body = (await resp.aread()).decode(errors="replace")
                    rec.error = f"HTTP {resp.status_code}: {body[:300]}"
                    return rec
                usage = await _read_events(resp, ep, rec)
            break
        except (httpx.HTTPError, json.JSONDecodeError, ValueError) as exc:
            if _closed_unanswered(exc, exchange):
                rec.reconnected = True
                exchange = _Exchange(fresh_only=True)
                continue
            rec.error = f"{type(exc).__name__}: {exc}"[:300]
            return rec
        finally:
            _EXCHANGE.reset(token)
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
