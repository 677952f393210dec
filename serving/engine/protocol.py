"""The OpenAI-compatible request bodies, parsed as vLLM parses them.

As in vLLM, a field outside the schema is accepted, ignored and logged (transformers
serve answers 422 instead); vLLM's sampling extensions (`ignore_eos`, `top_k`,
`stop_token_ids`, `seed`) work. Errors are OpenAI-shaped: `{"error": {"message",
"type", "param", "code"}}`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .sequence import SamplingParams


class StreamOptions(BaseModel):
    include_usage: bool = Field(
        False, description="send a last chunk (empty choices) with the request's usage"
    )
    continuous_usage_stats: bool = Field(
        False, description="put the usage so far in every chunk (vLLM extension)"
    )


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = Field(
        None, description="the served model's name (GET /v1/models); None: the only one"
    )
    max_tokens: int | None = Field(None, description="completion tokens at most")
    temperature: float = Field(1.0, description="0: greedy")
    top_p: float = Field(1.0, description="nucleus sampling mass, 0 < top_p <= 1")
    top_k: int = Field(-1, description="sample among the k likeliest tokens; -1 or 0: off")
    seed: int | None = Field(
        None, description="per-request seed: the same seed gives the same tokens"
    )
    stop: str | list[str] | None = Field(None, description="stop strings, not included in the text")
    stop_token_ids: list[int] | None = Field(None, description="token ids that end the completion")
    ignore_eos: bool = Field(False, description="keep generating after EOS (vLLM extension)")
    n: int = Field(1, description="completions per request; only 1 is supported")
    stream: bool = Field(False, description="server-sent events, one chunk per new text")
    stream_options: StreamOptions | None = None

    def ignored_fields(self) -> list[str]:
        return sorted(self.model_extra or {})

    def sampling_params(self, default_max_tokens: int) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            max_tokens=self.max_tokens if self.max_tokens is not None else default_max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            seed=self.seed,
            stop=[s for s in stop if s],
            stop_token_ids=list(self.stop_token_ids or []),
            ignore_eos=self.ignore_eos,
        )


class CompletionRequest(_Request):
    prompt: str | list[int] | list[str] | list[list[int]] = Field(
        ..., description="text or token ids; a list of one prompt is accepted, batches are not"
    )
    max_tokens: int | None = Field(
        16, description="completion tokens at most (OpenAI's default: 16)"
    )
    echo: bool = Field(False, description="not supported (must be false)")

    def single_prompt(self) -> str | list[int]:
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            if len(p) != 1:
                raise ValueError(
                    "this engine takes one prompt per request; send the prompts as separate requests"
                )
            p = p[0]
        return p


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(
        None, description="the newer name of max_tokens; wins if both"
    )
    add_generation_prompt: bool = True

    def sampling_params(self, default_max_tokens: int) -> SamplingParams:
        if self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return super().sampling_params(default_max_tokens)


ErrorType = Literal["BadRequestError", "NotFoundError", "InternalServerError"]


def error_body(
    message: str, type_: ErrorType = "BadRequestError", code: int = 400, param: str | None = None
) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
