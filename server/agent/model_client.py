"""The model's side of the loop: one chat-completions request, retried when the API is
busy, answered as a plain dict.

httpx rather than the `openai` client: httpx is already a dependency, and the loop needs
what the official client hides or reshapes: tool-call arguments exactly as the model
wrote them (the loop answers malformed ones itself), provider fields such as GLM's
`reasoning_content`, responses without a `usage` block, and a retry policy bounded by
the run's own time budget, with error texts that say what to change.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import anyio
import httpx

RETRY_STATUSES = {
    408,
    409,
    425,
    429,
    500,
    502,
    503,
    504,
}  # busy or transient: the same request may pass later
# Phrases OpenAI, vLLM, SGLang, llama.cpp and GLM use when the prompt does not fit the context window.
CONTEXT_PHRASES = (
    "context length",
    "context_length",
    "maximum context",
    "context window",
    "too many tokens",
    "prompt is too long",
    "reduce the length",
    "input is too long",
    "exceeds the limit of",
)


class ModelAPIError(Exception):
    """The model's API failed for good; the message says what to change. The run stops."""


class ContextTooLong(ModelAPIError):
    """The API refused the request because the conversation no longer fits its context."""


@dataclass
class Completion:
    message: dict  # choices[0].message, as the API sent it
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    usage_estimated: bool  # True when the API sent no usage and the counts are len(text) / 4
    latency_s: float  # the successful attempt only


@dataclass
class ChatClient:
    base_url: (
        str  # e.g. https://api.z.ai/api/paas/v4 or http://127.0.0.1:8000/v1 (no /chat/completions)
    )
    model: str
    api_key: str | None = None
    timeout_s: float = 300.0
    max_retries: int = 5
    backoff_s: float = 1.0  # first wait without a Retry-After; doubles per retry, with jitter
    max_backoff_s: float = 60.0
    extra_body: dict = field(
        default_factory=dict
    )  # provider fields, e.g. {"thinking": {"type": "disabled"}}

    def __post_init__(self) -> None:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        self._http = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(self.timeout_s, connect=10.0)
        )
        self.url = self.base_url.rstrip("/") + "/chat/completions"

    def redact(self, text: str) -> str:
        """The text with the API key replaced, for anything that leaves this object."""
        if self.api_key and len(self.api_key) >= 4:
            return text.replace(self.api_key, "[redacted]")
        return text

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(
        self,
        messages: list[dict],
        tools: list[dict],
        *,
        max_tokens: int | None,
        deadline: float,
        on_failure: Callable[[dict], None] = lambda failure: None,
    ) -> Completion:
        """One assistant turn. Retries busy or transient failures until `max_retries` or
        the deadline (time.monotonic()), then raises ModelAPIError. Each failed attempt is
        reported to `on_failure` as {"status", "why", "wait_s", "will_retry"}."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": False,
            **self.extra_body,
        }
        if tools:  # some servers reject an empty tools list, or tool_choice without tools
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if max_tokens:
            body["max_tokens"] = max_tokens
        num_failed = 0
        while True:
            started = time.monotonic()
            status, why, retry_after = await self._attempt(body, deadline)
            if status is None:
                return _completion(why, messages, time.monotonic() - started)
            wait_s = retry_after if retry_after is not None else self._backoff(num_failed)
            num_failed += 1
            why = self.redact(why)
            give_up = None
            if num_failed > self.max_retries:
                give_up = (
                    f"the model API failed {num_failed} times in a row (last: {why}); try again later, "
                    "or raise --max-retries"
                )
            elif time.monotonic() + wait_s >= deadline:
                give_up = (
                    f"the model API is failing ({why}) and waiting {wait_s:.0f} s more would pass the run's "
                    "time budget; try again later"
                )
            on_failure(
                {
                    "status": status,
                    "why": why,
                    "wait_s": round(wait_s, 3),
                    "will_retry": give_up is None,
                }
            )
            if give_up:
                raise ModelAPIError(give_up)
            await anyio.sleep(wait_s)

    async def _attempt(self, body: dict, deadline: float) -> tuple[int | None, Any, float | None]:
        """(None, response JSON, None) on success; else (status, why, the server's
        Retry-After in seconds or None). Status 0: no HTTP answer at all."""
        timeout = max(1.0, min(self.timeout_s, deadline - time.monotonic()))
        try:
            response = await self._http.post(self.url, json=body, timeout=timeout)
        except httpx.TimeoutException:
            return 0, f"no answer within {timeout:.0f} s", None
        except httpx.TransportError as exc:
            return 0, f"cannot reach {self.url}: {type(exc).__name__}: {exc}", None
        text = response.text
        if response.status_code in RETRY_STATUSES or response.status_code >= 500:
            retry_after = _retry_after_s(response.headers.get("retry-after"))
            return (
                response.status_code,
                f"HTTP {response.status_code}: {_snippet(text)}",
                retry_after,
            )
        if response.status_code >= 400:
            raise self._refusal(response.status_code, text)
        try:
            data = response.json()
        except ValueError:
            raise ModelAPIError(
                f"the model API answered HTTP 200 with a body that is not JSON: {_snippet(text)}; "
                "check --base-url (it should end in /v1 or the provider's API path)"
            ) from None
        if isinstance(data, dict) and data.get("error") and not data.get("choices"):
            raise self._refusal(200, json.dumps(data["error"]))
        return None, data, None

    def _backoff(self, num_failed: int) -> float:
        """Exponential backoff with jitter, so many clients of one busy API spread out."""
        return min(self.max_backoff_s, self.backoff_s * 2**num_failed) * random.uniform(0.5, 1.0)

    def _refusal(self, status: int, text: str) -> ModelAPIError:
        snippet = self.redact(_snippet(text))
        if any(p in text.lower() for p in CONTEXT_PHRASES):
            return ContextTooLong(
                f"the conversation no longer fits the model's context (HTTP {status}: {snippet})"
            )
        if status in (401, 403):
            return ModelAPIError(
                f"the model API refused the credentials (HTTP {status}: {snippet}); set the "
                "environment variable named by --api-key-env to a valid key"
            )
        if status == 404:
            return ModelAPIError(
                f"no such endpoint or model (HTTP 404 at {self.url}: {snippet}); check --base-url "
                "(without /chat/completions) and --model"
            )
        return ModelAPIError(
            f"the model API rejected the request (HTTP {status}: {snippet}); the fields it must "
            "accept are listed in docs/clients.md, 'GLM via tool calls' (--extra-body adds "
            "provider fields)"
        )


def _completion(data: Any, messages: list[dict], latency_s: float) -> Completion:
    choices = data.get("choices") if isinstance(data, dict) else None
    if (
        not choices
        or not isinstance(choices[0], dict)
        or not isinstance(choices[0].get("message"), dict)
    ):
        raise ModelAPIError(
            f"the model API answered without choices[0].message: {_snippet(json.dumps(data))}"
        )
    message = choices[0]["message"]
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    estimated = not isinstance(prompt, int) or not isinstance(completion, int)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        # about four characters per token: enough to keep a token budget honest
        prompt = len(json.dumps(messages)) // 4
        completion = len(json.dumps(message)) // 4
    return Completion(
        message=message,
        finish_reason=choices[0].get("finish_reason"),
        prompt_tokens=prompt,
        completion_tokens=completion,
        usage_estimated=estimated,
        latency_s=latency_s,
    )


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date (RFC 9110)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
