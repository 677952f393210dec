"""compile_kernel, step 1: the plan (pure): which code, for which target, and how the
compile job gets its signature (explicit, or inferred by running the launcher on the
spec's example shape); the job's op, payload and cache key.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from pathlib import Path

from ...kernels.coderef import CodeRef, impl_code, resolve_code
from ...kernels.workspace import WorkspaceError
from ...sandbox.worker.protocol import OP_COMPILE, OP_COMPILE_CUDA
from ..base import AgentError, ToolContext, as_agent_error
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
    spec_kernel = ws.kernel(inp.kernel) if inp.kernel else None
    with as_agent_error(WorkspaceError):
        code = resolve_code(
            ws,
            kernel=spec_kernel,
            impl=inp.impl,
            source=inp.source,
            path=inp.path,
            entry=inp.entry,
            what="code (Triton or CUDA C++)",
            require_entry=False,
        )
        # with source=/path= and kernel=, the variant is launched like the spec's impl
        spec_impl = impl_code(spec_kernel, inp.impl) if spec_kernel is not None else None
    text = code.text()
    file_name = _file_name(code, text, inp, Path(ws.root).resolve())
    where = {k: v for k, v in code.payload(ctx.sandbox.workspace_path).items() if k != "entry"}
    language = inp.language or (
        "cuda" if _looks_cuda(inp, text) or file_name.endswith((".cu", ".cuh")) else "triton"
    )
    if language == "cuda":
        return _cuda_job(inp, target, text, where, file_name)

    payload = {
        **where,
        "file_name": file_name,
        "entry": inp.entry,
        "target": plan_target_payload(target),
        "options": {"num_warps": inp.num_warps, "num_stages": inp.num_stages},
    }
    if inp.constexprs is not None:
        payload["constexprs"] = inp.constexprs
    if inp.launch_config:
        payload["launch_config"] = inp.launch_config
    if inp.signature is not None:
        payload["signature"] = inp.signature
    elif spec_impl is not None:
        spec = spec_kernel.spec
        payload["launch"] = {
            "launcher": inp.launcher or spec_impl.entry,
            "args": [asdict(a) for a in spec.args],
            "shape": _example_shape(spec, inp.shape),
            "dtype": inp.dtype or spec.dtypes[0],
        }
    else:
        raise AgentError(
            "give signature= (e.g. {'x_ptr': '*fp32', 'N': 'i32'}) and constexprs=, or kernel= a "
            "spec, so the launcher can run on its example shapes and infer them"
        )
    return {
        "op": OP_COMPILE,
        "language": language,
        "payload": payload,
        "what": _what(code, inp, payload),
        "key": cache_key("triton", text, payload, target.name, inp.entry),
    }


def _what(code: CodeRef, inp: Input, payload: dict) -> str:
    """What was compiled, for the summary: 'kda_decode/vtiled at B=1 H=32 K=128 V=128 float32'."""
    if code.source is not None:
        name = "inline source" + (f" launched like {inp.kernel}" if inp.kernel else "")
    elif code.impl is not None:
        name = f"{code.kernel}/{code.impl}"
    else:
        name = payload.get("file_name") or str(code.path)
    launch = payload.get("launch")
    if launch:
        sizes = " ".join(f"{k}={v}" for k, v in launch["shape"].items())
        return f"{name} at {sizes} {launch['dtype']}"
    return f"{name} with the signature given"


def _cuda_job(inp: Input, target: Target, text: str, where: dict, file_name: str) -> dict:
    if target.backend != "cuda":
        raise AgentError(
            f"CUDA C++ compiles for NVIDIA targets only; {target.name} is AMD: use a Triton "
            "kernel for AMD targets, or target= an sm_* architecture"
        )
    payload = {**where, "file_name": file_name, "arch": target.name, "flags": inp.nvcc_flags}
    return {
        "op": OP_COMPILE_CUDA,
        "language": "cuda",
        "payload": payload,
        "what": file_name,
        "key": cache_key("cuda", text, payload, target.name, inp.entry),
    }


def _file_name(code: CodeRef, text: str, inp: Input, root: Path) -> str:
    """How diagnostics name the file: 'candidate.py'/.cu for source, else its workspace path."""
    if code.source is not None:
        return "candidate.cu" if _looks_cuda(inp, text) else "candidate.py"
    if code.kernel is not None:
        return f"{code.kernel}/{code.path.name}"
    return str(code.path.relative_to(root))


def _example_shape(spec, given: dict[str, int] | None) -> dict[str, int]:
    """The spec's first GPU shape, with the sizes the agent gave replacing its own."""
    default = dict(spec.shapes.get("gpu", spec.shapes.get("cpu"))[0])
    unknown = sorted(set(given or {}) - set(default))
    if unknown:
        raise AgentError(
            f"shape names {unknown} are not dimensions of {spec.name}; its dimensions: "
            f"{', '.join(default)}"
        )
    return {**default, **(given or {})}


def plan_target_payload(target: Target) -> dict:
    """The target as the compile op takes it (Triton's GPUTarget fields plus the name)."""
    return {
        "name": target.name,
        "backend": target.backend,
        "arch": target.arch,
        "warp_size": target.warp_size,
    }


def _looks_cuda(inp: Input, code: str) -> bool:
    if inp.language is not None:
        return inp.language == "cuda"
    return "__global__" in code and "@triton.jit" not in code
