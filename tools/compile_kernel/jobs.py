"""compile_kernel, step 2: the compile job (or the workspace cache's earlier answer)."""

from __future__ import annotations

from pathlib import Path

from ...sandbox.job import Job
from ..base import AgentError, ToolContext
from .cache import CompileCache
from .report import format_diagnostic


async def compile(ctx: ToolContext, request: dict, timeout_s: float) -> tuple[dict, Path, bool]:
    """(raw worker result, folder with its files, cached?) for one planned job."""
    cache = CompileCache(ctx.workspace.state_dir / "compile-cache")
    hit = cache.get(request["key"])
    if hit is not None:
        return hit[0], hit[1], True
    await ctx.progress(0, 1, f"compiling ({request['op']})")
    res = await ctx.sandbox.run(
        Job(op=request["op"], payload=request["payload"], kind="compile", timeout_s=timeout_s),
        progress=ctx.progress,
    )
    if res.status == "timeout":
        raise AgentError(
            f"the compile did not finish within {timeout_s:g} s: look for a loop or blocking call "
            "at import time in the source, or raise timeout_s for a very large kernel"
        )
    if res.status != "ok":
        raise AgentError(
            f"the compile job failed ({res.status}): {res.error or res.stderr_tail[-2000:]}"
        )
    raw = res.result
    if raw.get("status") != "ok":
        raise AgentError(format_diagnostic(raw.get("status", "error"), raw.get("diagnostic") or {}))
    raw, stored = cache.put(request["key"], raw, res.out_dir)
    return raw, stored, False
