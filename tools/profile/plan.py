"""profile's plan: which target, which code, which job payload (pure: reads the workspace, runs nothing)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...kernels.coderef import CodeRef, resolve_code, spec_code
from ..base import AgentError, ToolContext
from . import names
from .schema import Input, LoadUsed

ATTACH_WAIT_S = 0.6  # the job waits this long after announcing its pid, so the host samplers see the whole window
DEFAULT_SERVE_S = 3.0  # a serve window: a few hundred engine steps on a CPU


@dataclass(frozen=True)
class Plan:
    target: str  # for people: "kernel rmsnorm (reference)", "workload w.py:step"
    payload: dict
    timeout_s: float
    env: dict
    overlap: list[tuple[str, str]]
    range_filters: list[str]
    load: LoadUsed | None = None


LOAD_FIELDS = {
    "load_concurrency": "concurrency",
    "load_input_len": "input_len",
    "load_output_len": "output_len",
}


def serve_load(inp: Input, ctx: ToolContext) -> LoadUsed:
    """The load for a serve window: the workload of the last serve_benchmark on this handle (what a
    criterion was judged on), each load_* argument given overriding its part; else the defaults."""
    given = {LOAD_FIELDS[k]: getattr(inp, k) for k in LOAD_FIELDS if k in inp.model_fields_set}
    defaults = {LOAD_FIELDS[k]: getattr(inp, k) for k in LOAD_FIELDS}
    last = _last_benchmark(ctx, inp.handle)
    if last is None:
        source = (
            "these arguments"
            if len(given) == len(LOAD_FIELDS)
            else "defaults (no serve_benchmark on this handle in the ledger)"
            + (" and these arguments" if given else "")
        )
        return LoadUsed(**{**defaults, **given}, source=source)
    experiment_id, workload, role = last
    concurrency = workload.max_concurrency or min(workload.num_requests, 256)
    found = {
        "concurrency": min(concurrency, 256),
        "input_len": workload.input_len,
        "output_len": workload.output_len,
    }
    source = (
        f"the last serve_benchmark on this handle{role}, experiment {experiment_id} (workload: {workload.dataset}, "
        f"max_concurrency {workload.max_concurrency}, input_len {workload.input_len}, output_len "
        f"{workload.output_len})"
    )
    if given:
        source += "; " + ", ".join(f"load_{k} from these arguments" for k in given)
    return LoadUsed(**{**found, **given}, source=source)


def _last_benchmark(ctx: ToolContext, handle: str):
    """(experiment id, its workload, the handle's role in words) of the newest successful
    serve_benchmark that loaded this engine: as the engine benchmarked (handle=) or as the
    baseline measured alternately with it (baseline_handle=), which sent it the same workload."""
    from ..serve_benchmark.schema import Workload

    experiments = getattr(ctx, "experiments", None)
    if experiments is None:
        return None
    for row in experiments(tool="serve_benchmark", limit=200):
        args = row.get("arguments") or {}
        if row.get("status") != "ok" or not isinstance(args, dict):
            continue
        if args.get("handle") == handle:
            role = ""
        elif args.get("baseline_handle") == handle:
            role = " (as its baseline_handle)"
        else:
            continue
        try:
            return row["id"], Workload.model_validate(args.get("workload") or {}), role
        except ValueError:
            continue
    return None


def make_plan(inp: Input, ctx: ToolContext) -> Plan:
    overlap = [_pair(p) for p in inp.overlap]
    for pattern in inp.ranges or []:
        _pattern(pattern, "ranges")
    if inp.handle is not None:
        if inp.kernel or inp.source or inp.path:
            raise AgentError(
                "give handle= (a running engine) or a kernel/workload target, not both"
            )
        duration = inp.duration_s or DEFAULT_SERVE_S
        used = serve_load(inp, ctx)
        payload = {
            "target": "serve",
            "handle": inp.handle,
            "duration_s": duration,
            "load_concurrency": used.concurrency,
            "load_input_len": used.input_len,
            "load_output_len": used.output_len,
        }
        load = (
            f"{used.concurrency} requests in flight, {used.input_len} prompt + {used.output_len} "
            "output tokens each"
            if used.concurrency
            else "no load from this tool"
        )
        return Plan(
            target=f"engine {inp.handle} for {duration:g} s, {load}",
            payload=payload,
            timeout_s=duration + inp.timeout_s,
            env={},
            overlap=overlap,
            range_filters=list(inp.ranges or []),
            load=used,
        )
    if inp.duration_s is not None:
        raise AgentError(
            "duration_s applies to handle= (a running engine); a workload runs until its entry "
            "returns, a kernel target for `calls` calls"
        )
    device = getattr(ctx.sandbox, "device", "cpu")
    if inp.kernel is not None:
        code, target, kernel_payload = _kernel_target(inp, ctx, device)
        payload = {"target": "kernel", "code": code, "kernel": kernel_payload}
    else:
        code, target = _workload_code(inp, ctx)
        payload = {"target": "workload", "code": code, "workload_args": inp.workload_args}
    payload["attach_wait_s"] = ATTACH_WAIT_S if inp.sample_threads else 0.0
    env = {"TRITON_INTERPRET": "1"} if device == "cpu" else {}
    return Plan(
        target=target,
        payload=payload,
        timeout_s=inp.timeout_s,
        env=env,
        overlap=overlap,
        range_filters=list(inp.ranges or []),
    )


def _pair(pair: list[str]) -> tuple[str, str]:
    if len(pair) != 2:
        raise AgentError(
            f"each overlap entry is a pair of range sets, e.g. ['kv_transfer', 'dispatch|combine']; "
            f"got {pair}"
        )
    return _pattern(pair[0], "overlap"), _pattern(pair[1], "overlap")


def _pattern(pattern: str, field: str) -> str:
    return names.check(pattern, field)


def _workload_code(inp: Input, ctx: ToolContext) -> tuple[dict, str]:
    if inp.source is None and inp.path is None:
        raise AgentError(
            "give a target: kernel= (a spec, with impl= or source=/path=+entry=), or a workload: "
            "path= (workspace file) or source= (inline Python) with entry=, or handle= (a serve)"
        )
    code = resolve_code(
        ctx.workspace, source=inp.source, path=inp.path, entry=inp.entry, what="workload"
    )
    return code.payload(ctx.sandbox.workspace_path), f"workload {_label(code, ctx)}"


def _label(code: CodeRef, ctx: ToolContext) -> str:
    if code.path is None:
        return f"source:{code.entry}"
    return f"{code.path.relative_to(ctx.workspace.root.resolve())}:{code.entry}"


def _kernel_target(inp: Input, ctx: ToolContext, device: str) -> tuple[dict, str, dict]:
    kernel = ctx.workspace.kernel(inp.kernel)
    spec = kernel.spec
    code = resolve_code(
        ctx.workspace,
        kernel=kernel,
        impl=inp.impl,
        source=inp.source,
        path=inp.path,
        entry=inp.entry,
        what="kernel code",
        allow_reference=True,
    )
    label = code.impl or _label(code, ctx)
    dtype = inp.dtype or spec.dtypes[0]
    if dtype not in spec.dtypes:
        raise AgentError(f"dtype {dtype!r} is not one of {spec.name}'s dtypes {list(spec.dtypes)}")
    shape = inp.shape or dict((spec.shapes.get(device) or next(iter(spec.shapes.values())))[0])
    names = sorted({d for a in spec.args for d in a.shape if isinstance(d, str)})
    if any(n not in shape for n in names) or any(
        not isinstance(v, int) or v <= 0 for v in shape.values()
    ):
        raise AgentError(
            f"shape {shape} must give positive integer sizes for {names}, e.g. "
            f"{dict(next(iter(spec.shapes.values()))[0])}"
        )
    custom = (
        spec_code(kernel, spec.make_inputs).payload(ctx.sandbox.workspace_path)
        if spec.make_inputs
        else None
    )
    args = [{**dataclasses.asdict(a), "shape": list(a.shape)} for a in spec.args]
    payload = {
        "args": args,
        "shape": shape,
        "dtype": dtype,
        "seed": 0,
        "calls": inp.calls,
        "make_inputs": custom,
    }
    return (
        code.payload(ctx.sandbox.workspace_path),
        f"kernel {spec.name} ({label}, {dtype}, {shape})",
        payload,
    )
