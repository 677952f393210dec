"""list_serves: the serving engines this server is running."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .base import Tool, ToolContext, ToolInput, ToolOutput


class Serve(BaseModel):
    handle: str = Field(description="Pass to serve_benchmark, profile, stop_serve.")
    engine: str = Field(description="Its adapter.")
    model: str | None = Field(description="Model folder, or null (builtin random weights).")
    alive: bool = Field(description="Whether its process still runs.")
    ready_s: float | None = Field(description="Start-up time to its first healthy answer, s.")
    started_at: float = Field(description="Unix time it was started, s.")
    exit_cause: str | None = Field(None, description="When it is no longer alive: why (exit code, signal, "
                                   "the memory limit) and the end of its log; null while alive. stop_serve it.")


class Input(ToolInput):
    """No arguments beyond hypothesis/expect (a subclass, so that they get ToolInput's limits)."""


class Output(ToolOutput):
    serves: list[Serve] = Field(description="The engines this server started and has not stopped (alive or "
                                "dead), oldest first.")


async def run(inp: Input, ctx: ToolContext) -> Output:
    serves = [Serve(**{k: v for k, v in e.describe().items() if k in Serve.model_fields}) for e in ctx.engines.list()]
    dead = [s for s in serves if not s.alive]
    return Output(serves=serves, summary=f"{len(serves) - len(dead)} engine(s) running" + (
        ": " + ", ".join(f"{s.handle} ({s.engine})" for s in serves if s.alive) if len(serves) > len(dead) else "")
        + "".join(f"; {s.handle} ({s.engine}) is dead: {s.exit_cause.splitlines()[0]}" for s in dead))


TOOL = Tool(
    name="list_serves",
    title="List serving engines",
    description="The serving engines this server started and is running, with their handles.",
    input_model=Input,
    output_model=Output,
    run=run,
    read_only=True,
    idempotent=True,
    kernel_field=None,
)
