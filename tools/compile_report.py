"""Judge side of compile_kernel: turn the worker's raw compiler output into per-kernel
resources, occupancy and instruction mix; diff two reports; say it in one line.

Everything here reads text the worker wrote (untrusted) and only counts: no verdict
depends on the candidate's word beyond the numbers its compiler printed.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, Field

from .occupancy import Target, occupancy
from .sass import (classify_amdgcn, classify_sass, parse_amdgcn_metadata, parse_ptxas_log,
                   parse_resource_usage)


class Occupancy(BaseModel):
    warps_per_sm: int = Field(description="Theoretical resident warps per SM (AMD: wavefronts per CU) for "
                              "this kernel's registers, shared memory and warps per block.")
    max_warps_per_sm: int = Field(description="The architecture's ceiling, warps per SM (AMD: waves per CU).")
    blocks_per_sm: int = Field(description="Resident blocks (workgroups) per SM; 0 means the block cannot launch.")
    occupancy_pct: float = Field(description="warps_per_sm / max_warps_per_sm, in percent.")
    limiting_factor: str = Field(description="What caps occupancy: registers, shared_memory, warps (warps per "
                                 "block), blocks (resident block limit) or threads_per_block (too large).")
    blocks_by: dict[str, int] = Field(default_factory=dict, description="Resident blocks per SM each limit "
                                      "alone would allow; the smallest is the limiting factor.")


class InstructionMix(BaseModel):
    """Static instruction counts in the SASS (NVIDIA) or AMDGCN (AMD) of one kernel: code
    size by class, not executed counts (a loop body counts once)."""

    tensor_core_mma: int = Field(0, description="Tensor-core matrix instructions (HMMA/HGMMA/QGMMA/IMMA/UTC*MMA; "
                                 "AMD v_mfma/v_wmma).")
    ffma: int = Field(0, description="FP32 fused multiply-add (FFMA; AMD v_fma/v_fmac_f32).")
    fmul: int = Field(0, description="FP32 multiplies.")
    fadd: int = Field(0, description="FP32 adds.")
    half_fma: int = Field(0, description="Packed FP16/BF16 FMA (HFMA2), including HFMA2.MMA register moves.")
    mufu: int = Field(0, description="Special-function unit ops: exp2, rsqrt, rcp, sin... (MUFU; AMD v_exp/v_rsq...).")
    global_load: int = Field(0, description="Global memory loads (LDG; AMD global_load/buffer_load).")
    global_store: int = Field(0, description="Global memory stores (STG; AMD global_store/buffer_store).")
    global_load_bits: dict[str, int] = Field(default_factory=dict, description="Global loads by access width in "
                                             "bits per thread, e.g. {'128': 4}: 128-bit = vectorised.")
    global_store_bits: dict[str, int] = Field(default_factory=dict, description="Global stores by width in bits.")
    async_copy: int = Field(0, description="Asynchronous global->shared copies (LDGSTS, cp.async; AMD direct-to-LDS).")
    bulk_copy: int = Field(0, description="Bulk / TMA copies (UBLKCP, UTMALDG, UTMASTG...).")
    shared_load: int = Field(0, description="Shared-memory loads (LDS, LDSM; AMD ds_read).")
    shared_store: int = Field(0, description="Shared-memory stores (STS, STSM; AMD ds_write).")
    local_load: int = Field(0, description="Local-memory loads (LDL; AMD scratch_load): spills or stack arrays.")
    local_store: int = Field(0, description="Local-memory stores (STL; AMD scratch_store).")
    barrier: int = Field(0, description="Block-wide barriers (BAR; AMD s_barrier).")
    total: int = Field(0, description="All instructions except NOPs.")
    tensor_core_ops: dict[str, int] = Field(default_factory=dict, description="Each tensor-core opcode with its "
                                            "shape and types, e.g. {'HGMMA.64x128x16.F32': 8}.")


class KernelResources(BaseModel):
    name: str = Field(description="Kernel function name as the compiler emitted it.")
    registers_per_thread: int = Field(description="NVIDIA: 32-bit registers per thread (cuobjdump REG). AMD: "
                                      "VGPRs per lane (arch + accumulation).")
    shared_memory_bytes: int = Field(description="Shared memory (AMD: LDS) per block, static + dynamic, bytes.")
    static_shared_memory_bytes: int = Field(description="Declared in the binary (cuobjdump SHARED / AMD group "
                                            "segment), bytes per block.")
    dynamic_shared_memory_bytes: int = Field(description="Requested at launch (Triton metadata.shared), bytes per block.")
    local_memory_bytes: int = Field(description="Local memory per thread outside the stack (cuobjdump LOCAL; AMD "
                                    "scratch per lane), bytes.")
    stack_frame_bytes: int | None = Field(None, description="Per-thread stack frame (ptxas), bytes; spills land here.")
    spill_stores_bytes: int | None = Field(None, description="Bytes of register spill stores per thread (ptxas -v); "
                                           "None for AMD (see spilled_registers).")
    spill_loads_bytes: int | None = Field(None, description="Bytes of register spill loads per thread (ptxas -v).")
    spilled_registers: int | None = Field(None, description="AMD: VGPRs + SGPRs spilled to scratch.")
    sgprs: int | None = Field(None, description="AMD: scalar registers per wave.")
    barriers: int | None = Field(None, description="NVIDIA: named barriers used (ptxas).")
    num_warps: int = Field(description="Warps (AMD: wavefronts) per block.")
    threads_per_block: int = Field(description="num_warps x warp size.")
    num_stages: int | None = Field(None, description="Triton software-pipelining stages.")
    occupancy: Occupancy
    instruction_mix: InstructionMix
    signature: dict[str, str] = Field(default_factory=dict, description="Argument types compiled for.")
    constexprs: dict = Field(default_factory=dict, description="Compile-time constants compiled with.")


def nvidia_kernels(raw: dict, out_dir: Path, target: Target, default_threads: int) -> list[KernelResources]:
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
        reports.append(KernelResources(
            name=raw.get("demangled", {}).get(name, name),
            registers_per_thread=regs, shared_memory_bytes=smem,
            static_shared_memory_bytes=fields.get("SHARED", 0), dynamic_shared_memory_bytes=dynamic,
            local_memory_bytes=fields.get("LOCAL", 0), stack_frame_bytes=fields.get("STACK"),
            spill_stores_bytes=log.get("spill_stores_bytes"), spill_loads_bytes=log.get("spill_loads_bytes"),
            barriers=log.get("barriers"), num_warps=num_warps, threads_per_block=num_warps * target.warp_size,
            num_stages=meta.get("num_stages"),
            occupancy=Occupancy(**occupancy(target.family, registers_per_thread=regs, shared_bytes_per_block=smem,
                                            warps_per_block=num_warps, warp_size=target.warp_size)),
            instruction_mix=InstructionMix(**mixes.get(name, {})),
            signature=meta.get("signature") or {}, constexprs=meta.get("constexprs") or {}))
    return reports


def amd_kernels(raw: dict, out_dir: Path, target: Target) -> list[KernelResources]:
    text = (out_dir / "kernel.amdgcn").read_text()
    md = parse_amdgcn_metadata(text)
    meta = raw["kernel"]
    vgprs = md.get("vgpr_count", 0) + md.get("agpr_count", 0)
    dynamic = int(meta.get("shared_dynamic_bytes") or 0)
    smem = md.get("lds_static_bytes", 0) + dynamic
    num_warps = meta["num_warps"]
    return [KernelResources(
        name=meta["name"], registers_per_thread=vgprs, shared_memory_bytes=smem,
        static_shared_memory_bytes=md.get("lds_static_bytes", 0), dynamic_shared_memory_bytes=dynamic,
        local_memory_bytes=md.get("scratch_bytes_per_lane", 0),
        spilled_registers=md.get("vgpr_spill_count", 0) + md.get("sgpr_spill_count", 0),
        sgprs=md.get("sgpr_count"), num_warps=num_warps, threads_per_block=num_warps * target.warp_size,
        num_stages=meta.get("num_stages"),
        occupancy=Occupancy(**occupancy(target.family, registers_per_thread=vgprs, shared_bytes_per_block=smem,
                                        warps_per_block=num_warps, warp_size=target.warp_size)),
        instruction_mix=InstructionMix(**classify_amdgcn(text)),
        signature=meta.get("signature") or {}, constexprs=meta.get("constexprs") or {})]


# ---- diff and summary -------------------------------------------------------------------

class Change(BaseModel):
    field: str = Field(description="Dotted path of what moved, e.g. 'registers_per_thread', "
                       "'instruction_mix.tensor_core_mma', 'occupancy.occupancy_pct'.")
    baseline: float | str | None = Field(description="Value in the baseline.")
    candidate: float | str | None = Field(description="Value in this compile.")
    delta: float | None = Field(description="candidate - baseline for numbers; None for text.")


_NOT_DIFFED = {"name", "signature", "occupancy.blocks_by"}


def _flatten(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if path in _NOT_DIFFED:
            continue
        if isinstance(value, dict):
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def diff(baseline: KernelResources, candidate: KernelResources) -> list[Change]:
    """Every field that differs; counts absent on one side count as 0."""
    base, cand = _flatten(baseline.model_dump()), _flatten(candidate.model_dump())
    changes = []
    for field in list(dict.fromkeys([*cand, *base])):
        zero = 0 if any(field.startswith(p) for p in ("instruction_mix.", "constexprs.")) else None
        b, c = base.get(field, zero), cand.get(field, zero)
        if b == c:
            continue
        numeric = isinstance(b, (int, float)) and isinstance(c, (int, float)) and not isinstance(b, bool)
        changes.append(Change(field=field, baseline=b, candidate=c, delta=round(c - b, 3) if numeric else None))
    return changes


def describe(target: str, k: KernelResources) -> str:
    spills = (f"{k.spill_stores_bytes} B spill stores" if k.spill_stores_bytes is not None
              else f"{k.spilled_registers or 0} spilled regs")
    text = (f"{target}: {k.name} {k.registers_per_thread} regs, {spills}, smem {k.shared_memory_bytes} B, "
            f"occupancy {k.occupancy.occupancy_pct:g}% (limit: {k.occupancy.limiting_factor})")
    if k.instruction_mix.tensor_core_mma:
        text += f", {k.instruction_mix.tensor_core_mma} tensor-core MMA"
    return text


_HEADLINE = {"registers_per_thread": "regs", "spill_stores_bytes": "B spill stores", "spilled_registers":
             "spilled regs", "shared_memory_bytes": "B smem", "occupancy.occupancy_pct": "% occupancy",
             "stack_frame_bytes": "B stack", "instruction_mix.local_load": "LDL", "instruction_mix.local_store": "STL",
             "instruction_mix.tensor_core_mma": "tensor-core MMA", "instruction_mix.total": "instructions"}


def describe_changes(changes: list[Change]) -> str:
    """The headline moves, e.g. '-16 regs, tensor-core MMA 0→8'; 'no change' when nothing moved."""
    parts = []
    for ch in changes:
        label = _HEADLINE.get(ch.field)
        if label is None or ch.delta is None:
            continue
        if ch.field.startswith("instruction_mix."):
            parts.append(f"{label} {ch.baseline:g}→{ch.candidate:g}")
        else:
            parts.append(f"{ch.delta:+g} {label}")
    if not changes:
        return "no change"
    return ", ".join(parts) if parts else f"{len(changes)} minor fields moved (see diff)"


# ---- errors and notes ------------------------------------------------------------------

def format_diagnostic(status: str, diag: dict) -> str:
    """'file:line:col: error: message' plus the source excerpt, like a compiler prints it."""
    what = {"source_error": "the source failed to load", "compile_error": "compile error",
            "setup_error": "cannot compile as asked"}.get(status, status)
    where = diag.get("file") or "source"
    if diag.get("line"):
        where += f":{diag['line']}" + (f":{diag['column']}" if diag.get("column") else "")
    text = f"{where}: {what}: {diag.get('message', '')}"
    if status == "source_error" and "Permission denied" in text:
        text += " (the sandbox denied it: compile jobs have no network and see the workspace read-only)"
    if diag.get("excerpt"):
        text += "\n" + diag["excerpt"]
    return text


def notes(raw: dict, out_dir: Path, kernels: list[KernelResources]) -> list[str]:
    """What the numbers above cannot be trusted for, or say that matters beyond them."""
    found = []
    sass = out_dir / "kernel.sass"
    if sass.is_file() and sass.read_text(errors="replace").startswith("nvdisasm failed"):
        found.append("no instruction mix: " + sass.read_text(errors="replace")[:300])
    for k in kernels:
        if k.occupancy.blocks_per_sm == 0:
            found.append(f"{k.name} cannot launch on this target: its {k.occupancy.limiting_factor} per block "
                         f"exceeds what one SM/CU offers (shared memory {k.shared_memory_bytes} B, "
                         f"{k.threads_per_block} threads); a launch would fail with OutOfResources")
    if any(k.spill_stores_bytes is None and k.spilled_registers is None for k in kernels):
        found.append("no spill numbers: ptxas -v printed no report for this kernel")
    return found


def emitted_arch(raw: dict, default: str) -> str:
    """The architecture ptxas says it compiled for (sm_90 becomes sm_90a in Triton)."""
    m = re.search(r"for '(sm_\w+)'", raw.get("ptxas_log", ""))
    return m.group(1) if m else default
