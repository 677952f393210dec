"""compile_kernel, step 3: turn the worker's raw compiler output into per-kernel
resources, occupancy and instruction mix.

Everything here reads text the worker wrote (untrusted) and only counts: no verdict
depends on the candidate's word beyond the numbers its compiler printed.
"""

from __future__ import annotations

from pathlib import Path

from ..base import AgentError
from .executed import attach
from .loops import find_loops
from .occupancy import Target, occupancy
from .sass import (
    classify_amdgcn,
    classify_sass,
    parse_amdgcn_metadata,
    parse_ptxas_log,
    parse_resource_usage,
)
from .schema import DEFAULT_CUDA_THREADS, Input, InstructionMix, KernelResources, Occupancy
from .trips import triton_loops


def judge(raw: dict, out_dir: Path, target: Target, inp: Input) -> list[KernelResources]:
    if target.backend == "hip":
        return amd_kernels(raw, out_dir, target)
    kernels = nvidia_kernels(raw, out_dir, target, inp.threads_per_block or DEFAULT_CUDA_THREADS)
    _attach_loops(kernels, raw, out_dir, inp)
    if inp.entry and raw.get("demangled") is not None:  # CUDA C++: only the named __global__
        chosen = [k for k in kernels if k.name == inp.entry or k.name.startswith(inp.entry + "(")]
        if not chosen:
            raise AgentError(
                f"no __global__ function {inp.entry!r}; compiled: {', '.join(k.name for k in kernels)}"
            )
        kernels = chosen
    if not kernels:
        raise AgentError("the compiler produced no kernel function (no __global__ in the source?)")
    return kernels


def nvidia_kernels(
    raw: dict, out_dir: Path, target: Target, default_threads: int
) -> list[KernelResources]:
    """One report per function in the cubin (Triton: one; CUDA C++: each __global__)."""
    usage = parse_resource_usage(raw.get("resource_usage", ""))
    ptxas = parse_ptxas_log(raw.get("ptxas_log", ""))
    sass_file = out_dir / "kernel.sass"
    mixes = classify_sass(sass_file.read_text()) if sass_file.is_file() else {}
    meta = raw.get("kernel") or {}
    reports = []
    for name, fields in usage.items():
        log = ptxas.get(name, {})
        num_warps = meta.get("num_warps") or max(1, default_threads // target.warp_size)
        dynamic = int(meta.get("shared_dynamic_bytes") or 0)
        regs = fields["REG"]
        smem = fields.get("SHARED", 0) + dynamic
        reports.append(
            KernelResources(
                name=raw.get("demangled", {}).get(name, name),
                registers_per_thread=regs,
                shared_memory_bytes=smem,
                static_shared_memory_bytes=fields.get("SHARED", 0),
                dynamic_shared_memory_bytes=dynamic,
                local_memory_bytes=fields.get("LOCAL", 0),
                stack_frame_bytes=fields.get("STACK"),
                spill_stores_bytes=log.get("spill_stores_bytes"),
                spill_loads_bytes=log.get("spill_loads_bytes"),
                barriers=log.get("barriers"),
                num_warps=num_warps,
                threads_per_block=num_warps * target.warp_size,
                num_stages=meta.get("num_stages"),
                occupancy=Occupancy(
                    **occupancy(
                        target.family,
                        registers_per_thread=regs,
                        shared_bytes_per_block=smem,
                        warps_per_block=num_warps,
                        warp_size=target.warp_size,
                    )
                ),
                instruction_mix=InstructionMix(**mixes.get(name, {})),
                signature=meta.get("signature") or {},
                constexprs=meta.get("constexprs") or {},
            )
        )
    return reports


def _attach_loops(kernels: list[KernelResources], raw: dict, out_dir: Path, inp: Input) -> None:
    """Loops, trip counts and executed estimates (NVIDIA: the SASS has the control flow)."""
    sass_file, ttir_file = out_dir / "kernel.sass", out_dir / "kernel.ttir"
    if not sass_file.is_file():
        return
    loops = find_loops(sass_file.read_text(errors="replace"))
    launch = raw.get("launch")
    triton = (
        triton_loops(ttir_file.read_text(errors="replace"), (launch or {}).get("scalar_args") or {})
        if ttir_file.is_file()
        else []
    )
    by_name = {raw.get("demangled", {}).get(name, name): found for name, found in loops.items()}
    for k in kernels:
        attach(k, by_name.get(k.name, []), triton, launch, inp.loop_trip_counts)


def amd_kernels(raw: dict, out_dir: Path, target: Target) -> list[KernelResources]:
    text = (out_dir / "kernel.amdgcn").read_text()
    md = parse_amdgcn_metadata(text)
    meta = raw["kernel"]
    # gfx90a and later (gfx942, gfx950: every AMD target here) have one unified register file:
    # .vgpr_count is the total the wave allocates, AGPRs included (the compiler's
    # TotalNumVgprs = NumVgprs rounded up to 4, plus NumAgprs), so .agpr_count is not added again
    vgprs = md.get("vgpr_count", 0)
    dynamic = int(meta.get("shared_dynamic_bytes") or 0)
    smem = md.get("lds_static_bytes", 0) + dynamic
    num_warps = meta["num_warps"]
    return [
        KernelResources(
            name=meta["name"],
            registers_per_thread=vgprs,
            shared_memory_bytes=smem,
            static_shared_memory_bytes=md.get("lds_static_bytes", 0),
            dynamic_shared_memory_bytes=dynamic,
            local_memory_bytes=md.get("scratch_bytes_per_lane", 0),
            spilled_registers=md.get("vgpr_spill_count", 0) + md.get("sgpr_spill_count", 0),
            sgprs=md.get("sgpr_count"),
            num_warps=num_warps,
            threads_per_block=num_warps * target.warp_size,
            num_stages=meta.get("num_stages"),
            occupancy=Occupancy(
                **occupancy(
                    target.family,
                    registers_per_thread=vgprs,
                    shared_bytes_per_block=smem,
                    warps_per_block=num_warps,
                    warp_size=target.warp_size,
                )
            ),
            instruction_mix=InstructionMix(**classify_amdgcn(text)),
            signature=meta.get("signature") or {},
            constexprs=meta.get("constexprs") or {},
        )
    ]
