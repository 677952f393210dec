"""profile's plan: which target, which code, which job payload (pure: reads the workspace, runs nothing)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ...kernels.coderef import CodeRef, resolve_code, spec_code
from ..base import AgentError, ToolContext
from .schema import Input

ATTACH_WAIT_S = 0.6  # the job waits this long after announcing its pid, so the host samplers see the whole window
NO_SERVING = ("no serving tools in this server yet: profile(handle=...) will profile a running engine from "
              "launch_serve through its /start_profile and /stop_profile endpoints for duration_s while a load "
              "runs. For now profile a workload instead: path= (or source=) + entry= naming a function that runs "
              "one step of the stack, threads included")


@dataclass(frozen=True)
class Plan:
    target: str  # for people: "kernel rmsnorm (reference)", "workload w.py:step"
    payload: dict
    timeout_s: float
    env: dict
    overlap: list[tuple[str, str]]
    range_filters: list[str]


def make_plan(inp: Input, ctx: ToolContext) -> Plan:
    if inp.handle is not None:
        raise AgentError(NO_SERVING)
    if inp.duration_s is not None:
        raise AgentError("duration_s applies to a serve handle only (not available yet); a workload runs until "
                         "its entry returns, a kernel target for `calls` calls")
    overlap = [_pair(p) for p in inp.overlap]
    for pattern in inp.ranges or []:
        _regex(pattern, "ranges")
    device = getattr(ctx.sandbox, "device", "cpu")
    if inp.kernel is not None:
        code, target, kernel_payload = _kernel_target(inp, ctx, device)
        payload = {"target": "kernel", "code": code, "kernel": kernel_payload}
    else:
        code, target = _workload_code(inp, ctx)
        payload = {"target": "workload", "code": code, "workload_args": inp.workload_args}
    payload["attach_wait_s"] = ATTACH_WAIT_S if inp.sample_threads else 0.0
    env = {"TRITON_INTERPRET": "1"} if device == "cpu" else {}
    return Plan(target=target, payload=payload, timeout_s=inp.timeout_s, env=env, overlap=overlap,
                range_filters=list(inp.ranges or []))


def _pair(pair: list[str]) -> tuple[str, str]:
    if len(pair) != 2:
        raise AgentError(f"each overlap entry is a pair of range sets, e.g. ['kv_transfer', 'dispatch|combine']; "
                         f"got {pair}")
    return _regex(pair[0], "overlap"), _regex(pair[1], "overlap")


def _regex(pattern: str, field: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise AgentError(f"{field}: {pattern!r} is not a valid regular expression ({exc}); use names joined "
                         "by |, e.g. 'dispatch|combine'") from None
    return pattern


def _workload_code(inp: Input, ctx: ToolContext) -> tuple[dict, str]:
    if inp.source is None and inp.path is None:
        raise AgentError("give a target: kernel= (a spec, with impl= or source=/path=+entry=), or a workload: "
                         "path= (workspace file) or source= (inline Python) with entry=, or handle= (a serve)")
    code = resolve_code(ctx.workspace, source=inp.source, path=inp.path, entry=inp.entry, what="workload")
    return code.payload(ctx.sandbox.workspace_path), f"workload {_label(code, ctx)}"


def _label(code: CodeRef, ctx: ToolContext) -> str:
    if code.path is None:
        return f"source:{code.entry}"
    return f"{code.path.relative_to(ctx.workspace.root.resolve())}:{code.entry}"


def _kernel_target(inp: Input, ctx: ToolContext, device: str) -> tuple[dict, str, dict]:
    kernel = ctx.workspace.kernel(inp.kernel)
    spec = kernel.spec
    code = resolve_code(ctx.workspace, kernel=kernel, impl=inp.impl, source=inp.source, path=inp.path,
                        entry=inp.entry, what="kernel code", allow_reference=True)
    label = code.impl or _label(code, ctx)
    dtype = inp.dtype or spec.dtypes[0]
    if dtype not in spec.dtypes:
        raise AgentError(f"dtype {dtype!r} is not one of {spec.name}'s dtypes {list(spec.dtypes)}")
    shape = inp.shape or dict((spec.shapes.get(device) or next(iter(spec.shapes.values())))[0])
    names = sorted({d for a in spec.args for d in a.shape if isinstance(d, str)})
    if any(n not in shape for n in names) or any(not isinstance(v, int) or v <= 0 for v in shape.values()):
        raise AgentError(f"shape {shape} must give positive integer sizes for {names}, e.g. "
                         f"{dict(next(iter(spec.shapes.values()))[0])}")
    custom = spec_code(kernel, spec.make_inputs).payload(ctx.sandbox.workspace_path) if spec.make_inputs else None
    args = [{**dataclasses.asdict(a), "shape": list(a.shape)} for a in spec.args]
    payload = {"args": args, "shape": shape, "dtype": dtype, "seed": 0, "calls": inp.calls, "make_inputs": custom}
    return code.payload(ctx.sandbox.workspace_path), f"kernel {spec.name} ({label}, {dtype}, {shape})", payload
