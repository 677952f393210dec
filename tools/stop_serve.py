"""stop_serve: stop an engine launch_serve started, with its whole process tree."""

from __future__ import annotations

from pydantic import Field

from .base import Tool, ToolContext, ToolInput, ToolOutput
from .common.engines import get_engine


class Input(ToolInput):
    handle: str = Field(max_length=64, description="The handle launch_serve returned.")


class Output(ToolOutput):
    handle: str = Field(description="The engine stopped.")
    uptime_s: float = Field(description="How long it ran, s.")


async def run(inp: Input, ctx: ToolContext) -> Output:
    import time

    eng = get_engine(ctx, inp.handle)
    tail = await ctx.engines.stop(inp.handle)
    ctx.artifact("engine.log", tail)
    uptime = time.time() - eng.started_at
    return Output(handle=inp.handle, uptime_s=round(uptime, 1),
                  summary=f"stopped {eng.adapter.name} engine {inp.handle} after {uptime:.0f} s")


TOOL = Tool(
    name="stop_serve",
    title="Stop a serving engine",
    description="Stop a serving engine started by launch_serve, and everything it started; its log is an artifact.",
    input_model=Input,
    output_model=Output,
    run=run,
    read_only=False,
    idempotent=False,
    kernel_field=None,
)
