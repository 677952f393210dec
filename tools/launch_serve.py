"""launch_serve: start a serving engine inside the sandbox and wait until it is ready."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..serving.adapters import ADAPTERS, EngineArgs
from ..serving.lifecycle import EngineError
from .base import AgentError, Tool, ToolContext, ToolInput, ToolOutput
from .common.engines import engine_label, resources_field, start_engine
from .common.expect import answer


class Expose(BaseModel):
    port: int = Field(
        0, ge=0, le=65535, description="TCP port on 127.0.0.1 (loopback only); 0: a free one."
    )
    token: str | None = Field(
        None,
        min_length=8,
        max_length=256,
        description="When set, clients must send `Authorization: Bearer TOKEN` (checked on the "
        "first request of each connection; 401 otherwise); null: any local process may connect.",
    )


class Input(ToolInput):
    engine: Literal[tuple(ADAPTERS)] = Field(  # type: ignore[valid-type]
        "builtin",
        description="builtin (the built-in engine: the "
        "workspace's kernels, runs on CPU), transformers (transformers serve "
        "--continuous-batching), vllm, sglang (GPU builds), command (any "
        "OpenAI-compatible server from args.command).",
    )
    args: EngineArgs = Field(
        default_factory=EngineArgs,
        description="Typed engine arguments; each adapter refuses what its engine has no flag for.",
    )
    ready_timeout_s: float = Field(
        300.0,
        gt=0,
        le=3600,
        description="How long to wait for the engine to answer its health check, s.",
    )
    resources: dict[str, float] | None = resources_field()
    expose: Expose | None = Field(
        None,
        description="Also open the engine to your own clients on this host (curl, `vllm bench "
        "serve --base-url`, guidellm): an HTTP port on 127.0.0.1 relayed to its socket, closed "
        "with the engine; its URL is in the answer and in list_serves. null: socket only.",
    )


class Output(ToolOutput):
    handle: str = Field(description="Pass to serve_benchmark, profile, stop_serve.")
    engine: str = Field(description="The adapter that started it.")
    ready_s: float = Field(description="From start to the first healthy answer, s.")
    socket: str = Field(
        description="Host path of the UNIX socket that reaches the engine's HTTP API (the engine "
        "has no network beyond its own loopback): curl --unix-socket SOCKET http://engine/v1/models."
    )
    extensions: list[str] = Field(
        description="Request fields outside the OpenAI schema this engine accepts "
        "(others are never sent to it)."
    )
    metrics: bool = Field(
        description="Whether it exports Prometheus /metrics (needed for phase attribution)."
    )
    profiling: bool = Field(description="Whether it has /start_profile and /stop_profile.")
    node: str | None = Field(
        None,
        description="The cluster node it runs on (address and Ray node id); null: the server's "
        "host. The socket path is then the node's.",
    )
    url: str | None = Field(
        None,
        description="With expose: the engine's OpenAI-compatible API for clients on this host, "
        "e.g. http://127.0.0.1:PORT (POST URL/v1/completions); null without expose.",
    )
    token_required: bool = Field(
        False, description="Whether url needs `Authorization: Bearer TOKEN` (expose.token)."
    )


async def run(inp: Input, ctx: ToolContext) -> Output:
    eng = await start_engine(
        ctx, inp.engine, inp.args, ready_timeout_s=inp.ready_timeout_s, resources=inp.resources
    )
    ctx.artifact("engine.log", eng.log_tail(200_000))
    url = None
    if inp.expose is not None:
        try:
            url = (await ctx.engines.expose(eng.handle, inp.expose.port, inp.expose.token)).url
        except Exception as exc:
            await ctx.engines.stop(eng.handle, how="after its port could not be opened")
            if isinstance(exc, EngineError):
                raise AgentError(str(exc)) from None
            raise
    out = Output(
        handle=eng.handle,
        engine=eng.adapter.name,
        ready_s=eng.ready_s or 0.0,
        socket=eng.socket_path,
        extensions=sorted(eng.adapter.extensions),
        metrics=eng.adapter.metrics_path is not None,
        profiling=eng.adapter.profile_paths is not None,
        node=eng.node,
        url=url,
        token_required=bool(url and inp.expose and inp.expose.token),
        summary=f"{engine_label(eng.adapter.name, eng.handle, eng.args, eng.node)} ready in "
        f"{eng.ready_s:.1f} s (sandboxed; it runs until stop_serve or until this server "
        "exits)" + (f"; open to this host's clients at {url}" if url else ""),
    )
    try:  # judged again after this returns; a condition that cannot be judged must not orphan the engine
        answer(inp.expect, TOOL.expect_fields, inp, out)
    except Exception:
        await ctx.engines.stop(eng.handle, how="after its expect could not be judged")
        raise
    return out


TOOL = Tool(
    name="launch_serve",
    title="Start a serving engine",
    description="Start a serving engine (builtin, transformers, vllm, sglang, or any OpenAI-compatible command) "
    "inside the sandbox (read-only workspace and model, its own folder, no network beyond its own loopback; the "
    "load generator reaches it through a UNIX socket) and wait until it answers its health check. Returns a "
    "handle for serve_benchmark, profile and stop_serve; engines stop when the server exits. "
    "expose={} also opens it on 127.0.0.1 for your own clients (curl, vllm bench serve).",
    input_model=Input,
    output_model=Output,
    run=run,
    read_only=False,
)
