"""The OpenAI-compatible HTTP API (Starlette), in the shapes vLLM serves.

POST /v1/completions, /v1/chat/completions (streaming SSE: `stream_options.include_usage`
adds a last chunk with empty choices and the usage; `continuous_usage_stats` puts the
usage so far in every chunk), GET /v1/models, /health, /metrics (Prometheus), POST
/start_profile and /stop_profile (a torch.profiler trace into --profile-dir).
"""

from __future__ import annotations

import json
import logging
import time
import uuid

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .async_engine import AsyncEngine
from .protocol import ChatCompletionRequest, CompletionRequest, error_body, usage
from .tokenizer import render_chat

log = logging.getLogger("infra_agent.engine")


class HTTPError(Exception):
    def __init__(self, message: str, status: int = 400, type_: str = "BadRequestError"):
        super().__init__(message)
        self.status, self.type = status, type_


class OpenAIServer:
    def __init__(self, engine: AsyncEngine):
        self.engine, self.llm = engine, engine.engine

    async def parse(self, request: Request, model_cls):
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HTTPError(f"the request body is not valid JSON: {exc}") from None
        try:
            req = model_cls.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise HTTPError(
                f"{loc}: {first['msg']} ({exc.error_count()} problem(s) in the request)"
            ) from None
        if req.ignored_fields():
            log.warning(
                "The following fields were present in the request but ignored: %s",
                req.ignored_fields(),
            )
        if req.model not in (None, self.llm.model_name):
            raise HTTPError(
                f"The model `{req.model}` does not exist. This engine serves `{self.llm.model_name}` "
                "(GET /v1/models).",
                404,
                "NotFoundError",
            )
        if req.n != 1:
            raise HTTPError("n must be 1: this engine returns one choice per request")
        return req

    def prepare(self, req, prompt) -> tuple[list[int], object]:
        ids = self.llm.encode(prompt)
        try:
            params = req.sampling_params(
                default_max_tokens=max(self.llm.max_model_len - len(ids), 1)
            )
            self.llm.validate(ids, params)
        except ValueError as exc:
            raise HTTPError(str(exc)) from None
        return ids, params

    async def completions(self, request: Request):
        req = await self.parse(request, CompletionRequest)
        if req.echo:
            raise HTTPError("echo is not supported")
        try:
            prompt = req.single_prompt()
        except ValueError as exc:
            raise HTTPError(str(exc)) from None
        ids, params = self.prepare(req, prompt)
        return await self.respond(req, ids, params, chat=False)

    async def chat_completions(self, request: Request):
        req = await self.parse(request, ChatCompletionRequest)
        messages = [m.model_dump(exclude_none=True) for m in req.messages]
        text = render_chat(self.llm.tokenizer, messages, req.add_generation_prompt)
        ids, params = self.prepare(req, text)
        return await self.respond(req, ids, params, chat=True)

    async def respond(self, req, ids, params, chat: bool):
        request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        stream = self.engine.generate(ids, params, request_id)
        if req.stream:
            return StreamingResponse(
                self.sse(req, stream, request_id, len(ids), chat), media_type="text/event-stream"
            )
        text, n_out, reason = "", 0, None
        try:
            async for out in stream:
                text, n_out, reason = (
                    text + out.text_delta,
                    out.seq.num_output_tokens,
                    out.finish_reason,
                )
        except ValueError as exc:  # refused by the engine thread
            raise HTTPError(str(exc)) from None
        except RuntimeError as exc:  # the step failed
            raise HTTPError(str(exc), 500, "InternalServerError") from None
        return JSONResponse(
            _final_body(request_id, self.llm.model_name, chat, text, reason, len(ids), n_out)
        )

    async def sse(self, req, stream, request_id, n_prompt, chat):
        opts = req.stream_options
        created, obj = int(time.time()), "chat.completion.chunk" if chat else "text_completion"
        base = {"id": request_id, "object": obj, "created": created, "model": self.llm.model_name}
        n_out = 0
        if chat:  # vLLM and OpenAI open a chat stream with the role
            yield _event(
                base
                | {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                },
                usage(n_prompt, 0) if opts and opts.continuous_usage_stats else None,
            )
        try:
            async for out in stream:
                n_out = out.seq.num_output_tokens
                if not out.text_delta and not out.finished:
                    continue
                choice = {"index": 0, "logprobs": None, "finish_reason": out.finish_reason}
                choice |= (
                    {"delta": {"content": out.text_delta}} if chat else {"text": out.text_delta}
                )
                yield _event(
                    base | {"choices": [choice]},
                    usage(n_prompt, n_out) if opts and opts.continuous_usage_stats else None,
                )
        except (
            ValueError,
            RuntimeError,
        ) as exc:  # the status line is sent: the error goes in the stream
            yield f"data: {json.dumps(error_body(str(exc), 'InternalServerError', 500))}\n\n"
        if opts and opts.include_usage:
            yield _event(base | {"choices": []}, usage(n_prompt, n_out))
        yield "data: [DONE]\n\n"

    async def models(self, request: Request):
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.llm.model_name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "infra-agent",
                        "max_model_len": self.llm.max_model_len,
                    }
                ],
            }
        )

    async def health(self, request: Request):
        return Response(status_code=200)

    async def metrics(self, request: Request):
        return Response(
            self.engine.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def start_profile(self, request: Request):
        try:
            return JSONResponse({"status": await self.engine.call("start_profile")})
        except ValueError as exc:
            raise HTTPError(str(exc)) from None

    async def stop_profile(self, request: Request):
        try:
            return JSONResponse(await self.engine.stop_profile())
        except ValueError as exc:
            raise HTTPError(str(exc)) from None

    async def on_http_error(self, request: Request, exc: HTTPError):
        return JSONResponse(error_body(str(exc), exc.type, exc.status), status_code=exc.status)

    def app(self) -> Starlette:
        routes = [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/start_profile", self.start_profile, methods=["POST"]),
            Route("/stop_profile", self.stop_profile, methods=["POST"]),
        ]
        return Starlette(routes=routes, exception_handlers={HTTPError: self.on_http_error})


def build_app(engine: AsyncEngine) -> Starlette:
    return OpenAIServer(engine).app()


def _event(body: dict, usage_now: dict | None) -> str:
    if usage_now is not None:
        body = body | {"usage": usage_now}
    return f"data: {json.dumps(body)}\n\n"


def _final_body(request_id, model, chat, text, reason, n_prompt, n_out) -> dict:
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": reason,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
    return {
        "id": request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(n_prompt, n_out),
    }
