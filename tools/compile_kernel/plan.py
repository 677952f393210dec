"""compile_kernel, step 1: the plan (pure): which code, for which target, and how the
compile job gets its signature (explicit, or inferred by running the launcher on the
spec's example shape); the job's op, payload and cache key.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from pathlib import Path

from ..base import AgentError, ToolContext
from .cache import cache_key
from .occupancy import DEFAULT_TARGET, TARGETS, Target, local_target
from .schema import Input

_local_target = functools.cache(local_target)  # asks nvidia-smi once per server, not per call


def resolve_target(name: str | None) -> Target:
    if name is None:
        name = _local_target() or DEFAULT_TARGET
    if name not in TARGETS:
        raise AgentError(f"unknown target {name!r}; use one of: {', '.join(TARGETS)}")
    return TARGETS[name]


def plan_job(inp: Input, ctx: ToolContext, target: Target) -> dict:
    """The job: op, payload and the text that identifies it in the cache."""
    ws = ctx.workspace
    if inp.source is not None and inp.path is not None:
        raise AgentError("give source= or path=, not both")
    spec_kernel = ws.kernel(inp.kernel) if inp.kernel else None
    if spec_kernel is not None and inp.impl is None:
        impls = spec_kernel.spec.impls
        inp = inp.model_copy(update={"impl": "triton" if "triton" in impls else next(iter(impls), None)})
    launcher = inp.launcher
    if inp.source is not None:
        code, host_file, file_name = inp.source, None, "candidate.cu" if _looks_cuda(inp, inp.source) else "candidate.py"
    elif inp.path is not None:
        host_file = ws.file(inp.path)
        code, file_name = ws.read_text(host_file), str(host_file.relative_to(Path(ws.root).resolve()))
    elif spec_kernel is not None:
        ref = spec_kernel.spec.impls.get(inp.impl)
        if ref is None:
            raise AgentError(f"kernel {inp.kernel!r} has no impl {inp.impl!r}; it has: "
                             f"{', '.join(spec_kernel.spec.impls)}")
        host_file = spec_kernel.source_of(ref)
        code, file_name = host_file.read_text(), f"{inp.kernel}/{host_file.name}"
    else:
        raise AgentError("name the code: kernel= (a spec), or source=/path= (Triton or CUDA C++)")
    where = {"source": code} if host_file is None else {"path": ctx.sandbox.workspace_path(host_file)}
    language = inp.language or ("cuda" if _looks_cuda(inp, code) or file_name.endswith((".cu", ".cuh")) else "triton")

    if language == "cuda":
        if target.backend != "cuda":
            raise AgentError(f"CUDA C++ compiles for NVIDIA targets only; {target.name} is AMD: use a Triton "
                             "kernel for AMD targets, or target= an sm_* architecture")
        payload = {**where, "file_name": file_name, "arch": target.name, "flags": inp.nvcc_flags}
        return {"op": "compile_cuda", "language": language, "payload": payload,
                "key": cache_key("cuda", code, payload, target.name, inp.entry)}

    payload = {**where, "file_name": file_name, "entry": inp.entry,
               "target": plan_target_payload(target),
               "options": {"num_warps": inp.num_warps, "num_stages": inp.num_stages}}
    if inp.constexprs is not None:
        payload["constexprs"] = inp.constexprs
    if inp.signature is not None:
        payload["signature"] = inp.signature
    elif spec_kernel is not None:
        spec = spec_kernel.spec
        impl_fn = spec.impls[inp.impl].split(":", 1)[1] if inp.impl in spec.impls else None
        payload["launch"] = {"launcher": launcher or impl_fn, "args": [asdict(a) for a in spec.args],
                             "shape": _example_shape(spec, inp.shape), "dtype": inp.dtype or spec.dtypes[0]}
    else:
        raise AgentError("give signature= (e.g. {'x_ptr': '*fp32', 'N': 'i32'}) and constexprs=, or kernel= a "
                         "spec, so the launcher can run on its example shapes and infer them")
    return {"op": "compile", "language": language, "payload": payload,
            "key": cache_key("triton", code, payload, target.name, inp.entry)}


def _example_shape(spec, given: dict[str, int] | None) -> dict[str, int]:
    """The spec's first GPU shape, with the sizes the agent gave replacing its own."""
    default = dict(spec.shapes.get("gpu", spec.shapes.get("cpu"))[0])
    unknown = sorted(set(given or {}) - set(default))
    if unknown:
        raise AgentError(f"shape names {unknown} are not dimensions of {spec.name}; its dimensions: "
                         f"{', '.join(default)}")
    return {**default, **(given or {})}


def plan_target_payload(target: Target) -> dict:
    """The target as the compile op takes it (Triton's GPUTarget fields plus the name)."""
    return {"name": target.name, "backend": target.backend, "arch": target.arch, "warp_size": target.warp_size}


def _looks_cuda(inp: Input, code: str) -> bool:
    if inp.language is not None:
        return inp.language == "cuda"
    return "__global__" in code and "@triton.jit" not in code
