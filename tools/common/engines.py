"""Starting an engine for a tool call: the model folder checked, the adapter chosen, errors
turned into what the agent can act on. Used by launch_serve, serve_benchmark and profile."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import Field

from ...kernels.workspace import WorkspaceError
from ...sandbox.cluster import resource_words
from ...serving.adapters import AdapterError, EngineArgs, adapter_for
from ...serving.interpreters import InterpreterError, find_interpreter
from ...serving.lifecycle import Engine, EngineError
from .errors import AgentError


def resources_field(whose: str = "the engine") -> Any:
    """The `resources` field of the tools that start an engine: where it runs."""
    return Field(
        None,
        description=f"On a server with a Ray cluster (serve --cluster): run {whose} on a node "
        'that has these Ray resources, held while it runs, e.g. {"GPU": 1, '
        '"accelerator_type:H200": 0.001} (device_info lists each node\'s). serve_benchmark '
        "then runs its load generator on that node too, so no network hop enters the "
        "latencies. null: on the server's own host.",
    )


async def start_engine(
    ctx,
    engine: str,
    args: EngineArgs,
    *,
    ready_timeout_s: float,
    resources: dict[str, float] | None = None,
) -> Engine:
    """An engine ready to serve: on this host, or with `resources` on a cluster node that has
    them."""
    if args.model:
        try:
            args = args.model_copy(update={"model": str(ctx.workspace.folder(args.model))})
        except Exception as exc:  # WorkspaceError: outside the workspace, or no such folder
            raise AgentError(str(exc)) from None
    try:
        adapter = adapter_for(engine, args)
        adapter.check(args)
    except AdapterError as exc:
        raise AgentError(str(exc)) from None
    interpreter = None
    if adapter.package is not None:
        try:
            configured = ctx.engines.pythons.get(engine) or ctx.workspace.engine_python(engine)
            interpreter = await asyncio.to_thread(
                find_interpreter, engine, adapter.package, configured
            )
        except (InterpreterError, WorkspaceError) as exc:
            raise AgentError(str(exc)) from None
    where = f" on a cluster node with {resource_words(resources)}" if resources else ""
    await ctx.progress(0, None, f"starting the {engine} engine{where}")
    try:
        return await ctx.engines.launch(
            adapter,
            args,
            interpreter=interpreter,
            ready_timeout_s=ready_timeout_s,
            progress=ctx.progress,
            resources=resources,
        )
    except EngineError as exc:
        raise AgentError(str(exc)) from None


def get_engine(ctx, handle: str) -> Engine:
    try:
        return ctx.engines.get(handle)
    except EngineError as exc:
        raise AgentError(str(exc)) from None


def live_engine(ctx, handle: str) -> Engine:
    """A running engine; a dead one is an error that says why it died (stop_serve clears it)."""
    eng = get_engine(ctx, handle)
    if not eng.alive:
        raise AgentError(
            f"the {eng.adapter.name} engine {handle} is no longer running ({eng.death_cause()}); "
            f"stop_serve it and launch_serve a new one; {eng.log_excerpt(1500)}"
        )
    return eng


def engine_tokenizer(engine: Engine):
    """The engine's tokenizer, so that prompts have exact token lengths: the checkpoint's
    tokenizer.json, bytes for the random-weights built-in engine, None (approximate lengths)
    when a checkpoint has no tokenizer.json. A loadgen PlainTokenizer."""
    from ...serving.loadgen import PlainTokenizer

    model_dir = Path(engine.args.model) if engine.args.model else None
    if model_dir is not None and not (model_dir / "tokenizer.json").is_file():
        return None
    return PlainTokenizer(model_dir)


def engine_label(engine: str, handle: str, args: EngineArgs, node: str | None = None) -> str:
    """'builtin engine serve-1a2b (model tiny, kernels rmsnorm=triton, max_num_seqs=8)': what
    runs, for summaries (the model folder by name; only the arguments that differ from the
    defaults; the cluster node it runs on, if not this host)."""
    if args.model:
        what = [f"model {Path(args.model).name}"]
    else:
        what = ["random weights"] if engine == "builtin" else []
    changed = args.model_dump(exclude_defaults=True, exclude={"model", "health_path"})
    for key, value in changed.items():
        if key == "kernels":
            what.append("kernels " + ", ".join(f"{op}={impl}" for op, impl in value.items()))
        elif key == "command":
            what.append("command " + " ".join(value)[:120])
        else:
            what.append(f"{key}={' '.join(value) if isinstance(value, list) else value}")
    label = f"{engine} engine {handle}" + (f" ({', '.join(what)})" if what else "")
    return label + (f" on node {node}" if node else "")
