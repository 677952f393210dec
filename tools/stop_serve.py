"""stop_serve: stop an engine launch_serve started, with its whole process tree."""

from __future__ import annotations

import time

from pydantic import Field

from .base import Tool, ToolContext, ToolInput, ToolOutput
from .common.engines import engine_label, get_engine


class Input(ToolInput):
    handle: str = Field(max_length=64, description="The handle launch_serve returned.")


class Output(ToolOutput):
    handle: str = Field(description="The engine stopped.")
    engine: str = Field(description="Its adapter: builtin, transformers, vllm, sglang, command.")
    model: str | None = Field(
        None,
        description="Its model folder, or null (no model folder: "
        "builtin random weights, or a command engine).",
    )
    uptime_s: float = Field(description="How long it ran, from start to stop, s.")
    already_stopped: bool = Field(
        False,
        description="True when the engine had been stopped "
        "before this call (nothing was done); summary says when and how.",
    )


async def run(inp: Input, ctx: ToolContext) -> Output:
    gone = ctx.engines.stopped.get(inp.handle)
    if gone is not None:  # a second stop: say what happened to it, do nothing
        uptime = gone.stopped_at - gone.started_at
        ago = time.time() - gone.stopped_at
        return Output(
            handle=inp.handle,
            engine=gone.engine,
            model=gone.model,
            uptime_s=round(uptime, 1),
            already_stopped=True,
            summary=f"{gone.engine} engine {inp.handle} already stopped ({gone.how}, "
            f"{ago:.0f} s ago, after running {uptime:.0f} s); nothing to do",
        )
    eng = get_engine(ctx, inp.handle)
    tail = await ctx.engines.stop(inp.handle)
    ctx.artifact("engine.log", tail)
    uptime = time.time() - eng.started_at
    label = engine_label(eng.adapter.name, inp.handle, eng.args, eng.node)
    return Output(
        handle=inp.handle,
        engine=eng.adapter.name,
        model=eng.args.model,
        uptime_s=round(uptime, 1),
        summary=f"stopped {label} after {uptime:.0f} s",
    )


TOOL = Tool(
    name="stop_serve",
    title="Stop a serving engine",
    description="Stop a serving engine started by launch_serve, and everything it started; its "
    "log is an artifact. Stopping a handle again answers already_stopped.",
    input_model=Input,
    output_model=Output,
    run=run,
    read_only=False,
)
