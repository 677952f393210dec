"""list_serves: the serving engines this server is running."""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from .base import Tool, ToolContext, ToolInput, ToolOutput
from .common.engines import engine_label

STOPPED_SHOWN = 5  # the summary names the newest stopped engines, and counts the rest


class Serve(BaseModel):
    handle: str = Field(description="Pass to serve_benchmark, profile, stop_serve.")
    engine: str = Field(description="Its adapter.")
    model: str | None = Field(description="Model folder, or null (builtin random weights).")
    alive: bool = Field(description="Whether its process still runs.")
    ready_s: float | None = Field(description="Start-up time to its first healthy answer, s.")
    started_at: float = Field(description="Unix time it was started, s.")
    node: str | None = Field(
        None,
        description="The cluster node it runs on (address and Ray node id); null: the "
        "server's host. An engine whose node died is not alive, and exit_cause says so.",
    )
    url: str | None = Field(
        None,
        description="Its port for clients on this host (launch_serve's expose), e.g. "
        "http://127.0.0.1:PORT; null: not exposed.",
    )
    token_required: bool = Field(
        False, description="Whether url needs `Authorization: Bearer TOKEN`."
    )
    exit_cause: str | None = Field(
        None,
        description="When it is no longer alive: why (exit code, signal, "
        "the memory limit) and the end of its log; null while alive. stop_serve it.",
    )


class Input(ToolInput):
    """No arguments beyond hypothesis/expect (a subclass, so that they get ToolInput's limits)."""


class Output(ToolOutput):
    serves: list[Serve] = Field(
        description="The engines this server started and has not stopped (alive or "
        "dead), oldest first."
    )


async def run(inp: Input, ctx: ToolContext) -> Output:
    engines = ctx.engines.list()
    serves = [
        Serve(**{k: v for k, v in e.describe().items() if k in Serve.model_fields}) for e in engines
    ]
    now = time.time()
    running = [
        f"{engine_label(e.adapter.name, e.handle, e.args, e.node)}, up {now - e.started_at:.0f} s"
        + (f", open at {s.url}" if s.url else "")
        for e, s in zip(engines, serves)
        if s.alive
    ]
    text = f"{len(running)} engine(s) running" + (": " + "; ".join(running) if running else "")
    text += "".join(
        f"; {s.handle} ({s.engine}) is dead: {(s.exit_cause or 'unknown cause').splitlines()[0]}"
        for s in serves
        if not s.alive
    )
    stopped = list(ctx.engines.stopped.items())
    if stopped:  # the newest few: a long session's summary stays one line
        text += "; stopped earlier: " + ", ".join(
            f"{h} ({gone.how})" for h, gone in stopped[-STOPPED_SHOWN:]
        )
        if len(stopped) > STOPPED_SHOWN:
            text += f" and {len(stopped) - STOPPED_SHOWN} before them"
    return Output(serves=serves, summary=text)


TOOL = Tool(
    name="list_serves",
    title="List serving engines",
    description="The serving engines this server started and is running, with their handles.",
    input_model=Input,
    output_model=Output,
    run=run,
    idempotent=True,
)
