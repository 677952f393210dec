"""Compile targets and theoretical occupancy from per-architecture limits.

Occupancy here is what the CUDA Occupancy Calculator computes: how many warps (AMD:
wavefronts) of this kernel fit on one SM (AMD: CU) at once, given its registers per
thread, shared memory (LDS) per block and warps per block, and which of those limits
binds. It is a ceiling, not a measurement: a kernel at 25 % can still saturate memory.

Sources of the numbers, per row:
- NVIDIA: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
  (max warps / blocks / 32-bit registers / shared memory per SM, max shared memory per
  block) and the CUDA Occupancy Calculator (register allocation unit 256 per warp,
  1 KB of shared memory reserved by the runtime per block on sm_80 and later, four
  register files of 16 K registers per SM, one per SM sub-partition).
- AMD: AMD Instinct MI300 (CDNA3) ISA guide and the ROCm "Compute Units" / HIP
  performance guidelines: 4 SIMDs per CU, 512 VGPRs per SIMD lane (unified arch +
  accumulation registers), allocation granularity 8 VGPRs, at most 8 waves per SIMD
  (32 per CU); LDS 64 KB per CU on gfx942 (MI300X) and 160 KB on gfx950 (MI350/355X).
"""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str  # what the agent asks for: "sm_90a", "gfx942"
    backend: str  # Triton backend: "cuda" or "hip"
    arch: int | str  # Triton GPUTarget arch: 90, "gfx942"
    warp_size: int
    family: str  # key into LIMITS


# Triton compiles sm_90 and sm_100 to their "a" (architecture-specific) variants itself;
# the plain names are accepted for nvcc, where the suffix matters (wgmma, tcgen05).
TARGETS = {
    t.name: t
    for t in [
        Target("sm_80", "cuda", 80, 32, "sm_80"),
        Target("sm_86", "cuda", 86, 32, "sm_86"),
        Target("sm_89", "cuda", 89, 32, "sm_89"),
        Target("sm_90", "cuda", 90, 32, "sm_90"),
        Target("sm_90a", "cuda", 90, 32, "sm_90"),
        Target("sm_100", "cuda", 100, 32, "sm_100"),
        Target("sm_100a", "cuda", 100, 32, "sm_100"),
        Target("sm_120", "cuda", 120, 32, "sm_120"),
        Target("gfx942", "hip", "gfx942", 64, "gfx942"),
        Target("gfx950", "hip", "gfx950", 64, "gfx950"),
    ]
}
DEFAULT_TARGET = "sm_90a"  # when no GPU is present: the most common datacenter target


@dataclass(frozen=True)
class Limits:
    max_warps_per_sm: int  # AMD: waves per CU
    max_blocks_per_sm: int
    register_files: int  # NVIDIA: SM sub-partitions; AMD: SIMDs per CU
    registers_per_file: int  # 32-bit registers in one file, all lanes together
    register_unit: int  # allocation granularity per warp, in registers (all lanes)
    shared_per_sm_bytes: int
    shared_per_block_max_bytes: int
    shared_reserved_per_block_bytes: int
    max_threads_per_block: int = 1024


KB = 1024
LIMITS = {
    "sm_80": Limits(64, 32, 4, 16 * KB, 256, 164 * KB, 163 * KB, 1 * KB),  # A100
    "sm_86": Limits(48, 16, 4, 16 * KB, 256, 100 * KB, 99 * KB, 1 * KB),  # RTX 30xx, A10/A40
    "sm_89": Limits(48, 24, 4, 16 * KB, 256, 100 * KB, 99 * KB, 1 * KB),  # L4, L40S, RTX 40xx
    "sm_90": Limits(64, 32, 4, 16 * KB, 256, 228 * KB, 227 * KB, 1 * KB),  # H100, H200
    "sm_100": Limits(64, 32, 4, 16 * KB, 256, 228 * KB, 227 * KB, 1 * KB),  # B200
    "sm_120": Limits(48, 32, 4, 16 * KB, 256, 100 * KB, 99 * KB, 1 * KB),  # RTX 50xx
    # 512 VGPRs x 64 lanes per SIMD; granularity 8 VGPRs x 64 lanes
    "gfx942": Limits(32, 32, 4, 512 * 64, 8 * 64, 64 * KB, 64 * KB, 0),  # MI300X/MI325X
    "gfx950": Limits(32, 32, 4, 512 * 64, 8 * 64, 160 * KB, 160 * KB, 0),  # MI350X/MI355X
}


def occupancy(
    family: str,
    *,
    registers_per_thread: int,
    shared_bytes_per_block: int,
    warps_per_block: int,
    warp_size: int,
) -> dict:
    """Theoretical resident warps per SM and what limits them.

    Returns {"warps_per_sm", "max_warps_per_sm", "blocks_per_sm", "occupancy_pct",
    "limiting_factor", "blocks_by": {limit: blocks}}; blocks_per_sm 0 means the block
    cannot launch at all (the limiting factor says why).
    """
    lim = LIMITS[family]
    blocks_by: dict[str, int] = {
        "warps": lim.max_warps_per_sm // warps_per_block,
        "blocks": lim.max_blocks_per_sm,
    }
    if registers_per_thread > 0:
        per_warp = (
            math.ceil(registers_per_thread * warp_size / lim.register_unit) * lim.register_unit
        )
        warps_by_regs = lim.register_files * (lim.registers_per_file // per_warp)
        blocks_by["registers"] = warps_by_regs // warps_per_block
    smem = shared_bytes_per_block + lim.shared_reserved_per_block_bytes
    if shared_bytes_per_block > 0:
        fits = shared_bytes_per_block <= lim.shared_per_block_max_bytes
        blocks_by["shared_memory"] = lim.shared_per_sm_bytes // smem if fits else 0
    if warps_per_block * warp_size > lim.max_threads_per_block:
        blocks_by["threads_per_block"] = 0
    blocks = min(blocks_by.values())
    # Ties: name the structural ceiling first (fewer registers cannot lift it), then
    # registers before shared memory (the cheaper one to change).
    order = ["threads_per_block", "warps", "blocks", "registers", "shared_memory"]
    limiter = min(blocks_by, key=lambda k: (blocks_by[k], order.index(k)))
    warps = blocks * warps_per_block
    return {
        "warps_per_sm": warps,
        "max_warps_per_sm": lim.max_warps_per_sm,
        "blocks_per_sm": blocks,
        "occupancy_pct": round(100.0 * warps / lim.max_warps_per_sm, 1),
        "limiting_factor": limiter,
        "blocks_by": blocks_by,
    }


def local_target() -> str | None:
    """The target of the GPU on this host, from nvidia-smi / rocm_agent_enumerator
    (no torch import, no CUDA context); None when there is none."""
    try:
        if shutil.which("nvidia-smi"):
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.split()
            if out:
                major, minor = out[0].split(".")
                name = f"sm_{major}{minor}"
                return _known_target(name)
        if shutil.which("rocm_agent_enumerator"):
            out = subprocess.run(
                ["rocm_agent_enumerator"], capture_output=True, text=True, timeout=10
            ).stdout
            return next((g for g in out.split() if g in TARGETS), None)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return None


def _known_target(name: str) -> str | None:
    """The target for an sm_XY: its arch-specific 'a' variant where we have one (sm_90 -> sm_90a)."""
    if f"{name}a" in TARGETS:
        return f"{name}a"
    if name in TARGETS:
        return name
    return None
