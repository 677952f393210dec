"""compile_kernel: does it compile for target T, and at what cost in registers,
shared memory, spills, occupancy and instructions. No GPU needed.

Plan (here): resolve the code, the target and how to get the signature; look in the
per-workspace cache. Run (sandbox): Triton AOT or nvcc, plus cuobjdump/nvdisasm, in a
worker. Judge (compile_report.py): parse the compiler's own reports into numbers, diff
against a baseline, one summary line.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from pydantic import Field

from .base import AgentError, Tool, ToolContext, ToolInput, ToolOutput
from .compile_cache import CompileCache, cache_key
from .compile_report import (Change, KernelResources, amd_kernels, describe, describe_changes, diff,
                             emitted_arch, format_diagnostic, notes, nvidia_kernels)
from .occupancy import DEFAULT_TARGET, TARGETS, local_target

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_CUDA_THREADS = 256
_local_target = functools.cache(local_target)  # asks nvidia-smi once per server, not per call


class Input(ToolInput):
    kernel: str | None = Field(None, description="Kernel spec name (list_kernels). Alone: compile its impl. With "
                               "source=/path=: your variant, launched like the spec (its example shapes infer "
                               "the signature).")
    impl: str | None = Field(None, description="Which implementation of the spec to compile (describe_kernel; "
                             "default: 'triton' if the spec has it, else its first).")
    source: str | None = Field(None, description="Inline kernel source: Python with @triton.jit, or CUDA C++.")
    path: str | None = Field(None, description="A workspace file instead of source= (.py Triton, .cu CUDA C++).")
    language: Literal["triton", "cuda"] | None = Field(None, description="'triton' or 'cuda' (CUDA C++ via "
                                                       "nvcc); default: from the file suffix or the source.")
    entry: str | None = Field(None, description="The @triton.jit function to compile (default: the one the "
                              "launcher launches, else the first in the file). CUDA C++: report only this "
                              "__global__ function. A Python wrapper's name here is used as the launcher.")
    launcher: str | None = Field(None, description="Python wrapper that launches the kernel; it is run on "
                                 "uninitialised tensors of the spec's example shape to infer signature, constexprs and "
                                 "num_warps as a real launch would (default: the spec impl's function).")
    signature: dict[str, str] | None = Field(None, description="Explicit argument types instead of inference, "
                                             "e.g. {'x_ptr': '*fp16', 'N': 'i32', 'eps': 'fp32'}; pointers "
                                             "are assumed 16-byte aligned, as torch allocations are.")
    constexprs: dict[str, int | float | bool | str] | None = Field(None, description="tl.constexpr values, "
                                                                   "e.g. {'BLOCK_N': 1024}; with a launcher they "
                                                                   "override what it passes (and @autotune's "
                                                                   "first config, which is used otherwise).")
    shape: dict[str, int] | None = Field(None, description="Example sizes for inference, e.g. {'M': 1, 'N': 4096} "
                                         "(default: the spec's first GPU shape). Memory is reserved, never touched.")
    dtype: str | None = Field(None, description="Example dtype for inference (default: the spec's first).")
    target: str | None = Field(None, description=f"One of {', '.join(TARGETS)}. Default: this host's GPU, "
                               f"else {DEFAULT_TARGET}.")
    num_warps: int | None = Field(None, ge=1, le=32, description="Warps per block (overrides the launcher's).")
    num_stages: int | None = Field(None, ge=1, le=8, description="Software-pipelining stages (overrides).")
    threads_per_block: int | None = Field(None, ge=32, le=1024, description="CUDA C++ only: block size you "
                                          f"launch with, for occupancy (default {DEFAULT_CUDA_THREADS}).")
    nvcc_flags: list[str] = Field(default_factory=list, description="CUDA C++ only: extra nvcc flags, e.g. "
                                  "['-O3', '--use_fast_math', '-maxrregcount=64'].")
    baseline: str | None = Field(None, description="Compare with: an experiment_id of an earlier compile_kernel "
                                 "call, or another source compiled the same way. The diff lists what moved.")
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, le=600, description="Wall-clock limit per compile job, s.")


class Output(ToolOutput):
    target: str = Field(description="Target compiled for, e.g. 'sm_90a', 'gfx942'.")
    arch: str = Field(description="Architecture the compiler actually emitted, e.g. 'sm_90a'.")
    backend: str = Field(description="'cuda' (NVIDIA) or 'hip' (AMD).")
    language: str = Field(description="'triton' or 'cuda'.")
    kernels: list[KernelResources] = Field(description="One entry per compiled kernel function.")
    cached: bool = Field(description="True when this answer came from the workspace's compile cache "
                         "(same source, target and options as an earlier compile).")
    compile_s: float = Field(description="Compiler wall time of the (original) compile, in seconds.")
    notes: list[str] = Field(default_factory=list, description="What could not be measured and why (e.g. "
                             "no SASS because nvdisasm failed); empty when every number above is the compiler's.")
    baseline: str | None = Field(None, description="What the diff compares against.")
    diff: list[Change] = Field(default_factory=list, description="Fields that differ from the baseline "
                               "(first kernel of each): registers, spills, smem, occupancy, instruction counts.")


async def run(inp: Input, ctx: ToolContext) -> Output:
    target = resolve_target(inp.target)
    request = plan(inp, ctx, target)
    raw, out_dir, cached = await compile_request(ctx, request, inp.timeout_s)
    kernels = judge(raw, out_dir, target, inp)
    for name in raw.get("files", []):
        ctx.artifact(name, out_dir / name)
    arch = emitted_arch(raw, target.name)
    out = Output(target=target.name, arch=arch, backend=target.backend, language=request["language"],
                 kernels=kernels, cached=cached, compile_s=round(raw.get("compile_s", 0.0), 3))
    out.notes = notes(raw, out_dir, kernels)
    summary = describe(arch, kernels[0])
    if inp.baseline is not None:
        base_kernels, out.baseline = await _baseline(inp, ctx, target)
        base = next((b for b in base_kernels if b.name == kernels[0].name), base_kernels[0])
        out.diff = diff(base, kernels[0])
        summary += f"; vs {out.baseline}: {describe_changes(out.diff)}"
    if cached:
        summary += " (cached)"
    if inp.hypothesis:
        summary += f". Hypothesis '{inp.hypothesis}': judge it by the numbers above" + (" and the diff" if out.diff else "")
    out.summary = summary
    return out


def resolve_target(name: str | None):
    if name is None:
        name = _local_target() or DEFAULT_TARGET
    if name not in TARGETS:
        raise AgentError(f"unknown target {name!r}; use one of: {', '.join(TARGETS)}")
    return TARGETS[name]


def plan(inp: Input, ctx: ToolContext, target) -> dict:
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


def plan_target_payload(target) -> dict:
    """The target as the compile op takes it (Triton's GPUTarget fields plus the name)."""
    return {"name": target.name, "backend": target.backend, "arch": target.arch, "warp_size": target.warp_size}


def judge(raw: dict, out_dir: Path, target, inp: Input) -> list[KernelResources]:
    if target.backend == "hip":
        return amd_kernels(raw, out_dir, target)
    kernels = nvidia_kernels(raw, out_dir, target, inp.threads_per_block or DEFAULT_CUDA_THREADS)
    if inp.entry and raw.get("demangled") is not None:  # CUDA C++: only the named __global__
        chosen = [k for k in kernels if k.name == inp.entry or k.name.startswith(inp.entry + "(")]
        if not chosen:
            raise AgentError(f"no __global__ function {inp.entry!r}; compiled: {', '.join(k.name for k in kernels)}")
        kernels = chosen
    if not kernels:
        raise AgentError("the compiler produced no kernel function (no __global__ in the source?)")
    return kernels


async def compile_request(ctx: ToolContext, request: dict, timeout_s: float) -> tuple[dict, Path, bool]:
    """(raw worker result, folder with its files, cached?) for one planned job."""
    from ..sandbox import Job

    cache = CompileCache(ctx.workspace.state_dir / "compile-cache")
    hit = cache.get(request["key"])
    if hit is not None:
        return hit[0], hit[1], True
    await ctx.progress(0, 1, f"compiling ({request['op']})")
    res = await ctx.sandbox.run(Job(op=request["op"], payload=request["payload"], kind="compile",
                                    timeout_s=timeout_s), progress=ctx.progress)
    if res.status == "timeout":
        raise AgentError(f"the compile did not finish within {timeout_s:g} s: look for a loop or blocking call "
                         "at import time in the source, or raise timeout_s for a very large kernel")
    if res.status != "ok":
        raise AgentError(f"the compile job failed ({res.status}): {res.error or res.stderr_tail[-2000:]}")
    raw = res.result
    if raw.get("status") != "ok":
        raise AgentError(format_diagnostic(raw.get("status", "error"), raw.get("diagnostic") or {}))
    raw, stored = cache.put(request["key"], raw, res.out_dir)
    return raw, stored, False


async def _baseline(inp: Input, ctx: ToolContext, target) -> tuple[list[KernelResources], str]:
    row = ctx.experiment(inp.baseline)
    if row is not None:
        if row.get("tool") != "compile_kernel" or not (row.get("result") or {}).get("kernels"):
            raise AgentError(f"experiment {inp.baseline} is not a successful compile_kernel call; give the id "
                             "of one, or baseline source code")
        result = row["result"]
        return [KernelResources(**k) for k in result["kernels"]], f"{inp.baseline} ({result.get('target')})"
    if "\n" not in inp.baseline and "def " not in inp.baseline and "__global__" not in inp.baseline:
        raise AgentError(f"baseline {inp.baseline!r} is neither an experiment id in the ledger nor source code")
    base_inp = inp.model_copy(update={"source": inp.baseline, "path": None, "baseline": None})
    try:
        request = plan(base_inp, ctx, target)
        raw, out_dir, _ = await compile_request(ctx, request, inp.timeout_s)
    except AgentError as exc:
        raise AgentError(f"the baseline source failed (the candidate compiled): {exc}") from None
    for name in raw.get("files", []):
        if name.endswith((".sass", ".amdgcn", ".ptx")):
            ctx.artifact(f"baseline-{name}", out_dir / name)
    return judge(raw, out_dir, target, base_inp), "baseline source"


def _looks_cuda(inp: Input, code: str) -> bool:
    if inp.language is not None:
        return inp.language == "cuda"
    return "__global__" in code and "@triton.jit" not in code



TOOL = Tool(
    name="compile_kernel",
    title="Compile a kernel for a GPU target",
    description="Compile a Triton or CUDA C++ kernel ahead of time for an NVIDIA (sm_80..sm_120) or AMD (gfx942, "
    "gfx950) target, without a GPU, and report what the compiler says: errors at your source line, registers "
    "per thread, shared memory, spills, theoretical occupancy and its limiting factor, the SASS/AMDGCN "
    "instruction mix (tensor-core MMA, vector widths, LDL/STL), and the IR as artifacts. With baseline= it "
    "lists what moved. The cheapest check of a register, tiling or vectorisation hypothesis.",
    input_model=Input,
    output_model=Output,
    run=run,
    read_only=True,
    idempotent=True,
)
