"""Where a measured time sits under the device's ceilings (the roofline model).

A call that moves B bytes and does F floating-point operations cannot take less than
max(B / peak bandwidth, F / peak rate). That floor says three things: how close the
kernel is to the hardware (percent of each ceiling), which ceiling binds (memory or
compute; "latency" when the kernel is far from both, i.e. launch, interpreter or
synchronisation overhead dominates), and whether the time is physically possible at
all. Pure arithmetic; the ceilings come from tools/common/peaks.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Bound = Literal["memory", "compute", "latency"]

# A kernel that reaches less than this fraction of the roofline is bound by something
# the roofline does not model: launch overhead, the interpreter, host round trips.
LATENCY_UTILISATION = 0.10
# Measured ceilings come from a copy and a library matmul, which a tuned kernel can beat
# by some tens of percent; running faster than half the floor computed from the best
# measured rates is not tuning, it is not doing the work (or the clock is fooled).
IMPOSSIBLE_FRACTION = 0.5


@dataclass(frozen=True)
class Ceilings:
    bandwidth_gbps: float  # sustained memory bandwidth (DRAM / HBM), GB/s
    flops_tflops: float  # peak rate in the kernel's dtype, TFLOP/s
    # the fastest any data can move or be computed on this device: the physical floor
    best_bandwidth_gbps: float
    best_flops_tflops: float
    source: str  # "measured" or "datasheet: ..." (never silently mixed)


def ceilings_for(peaks: dict, dtype: str) -> Ceilings:
    """The ceilings that apply to one dtype, from a peaks record (see tools/common/peaks.py)."""
    rates = peaks.get("matmul_tflops") or {}
    if not rates:
        raise ValueError("the peaks record has no matmul rate")
    flops = rates.get(dtype) or max(rates.values())
    bandwidth = float(peaks["copy_gbps"])
    # On a CPU, data that stays in cache moves at cache speed: that, not DRAM, is the floor.
    best_bw = max(bandwidth, float(peaks.get("cache_copy_gbps") or 0.0))
    return Ceilings(
        bandwidth_gbps=bandwidth,
        flops_tflops=float(flops),
        best_bandwidth_gbps=best_bw,
        best_flops_tflops=float(max(rates.values())),
        source=str(peaks.get("source", "measured")),
    )


@dataclass(frozen=True)
class Roofline:
    achieved_gflops: float
    achieved_gbps: float
    pct_of_peak_flops: float
    pct_of_peak_bandwidth: float
    arithmetic_intensity: float  # FLOPs per byte
    bound: Bound
    roofline_ms: float  # max(bytes / bandwidth, flops / rate): the best this kernel could do here
    floor_ms: float  # the same from the best rates anything reached on this device
    is_impossible: bool
    explanation: str


def analyse(time_ms: float, flops: float, bytes_moved: float, ceilings: Ceilings) -> Roofline:
    if time_ms <= 0:
        raise ValueError("time must be positive")
    seconds = time_ms / 1e3
    memory_s = bytes_moved / (ceilings.bandwidth_gbps * 1e9)
    compute_s = flops / (ceilings.flops_tflops * 1e12)
    roof_s = max(memory_s, compute_s)
    floor_s = max(
        bytes_moved / (ceilings.best_bandwidth_gbps * 1e9),
        flops / (ceilings.best_flops_tflops * 1e12),
    )
    utilisation = roof_s / seconds
    if utilisation < LATENCY_UTILISATION:
        bound: Bound = "latency"
        why = (
            f"at {utilisation:.1%} of the roofline neither memory nor compute is the limit: "
            "per-call overhead (launch, interpreter, synchronisation) dominates"
        )
    elif memory_s >= compute_s:
        bound = "memory"
        why = f"memory-bound: {bytes_moved / seconds / 1e9:.1f} GB/s of {ceilings.bandwidth_gbps:.0f} GB/s"
    else:
        bound = "compute"
        why = f"compute-bound: {flops / seconds / 1e12:.3g} TFLOP/s of {ceilings.flops_tflops:.3g} TFLOP/s"
    impossible = seconds < IMPOSSIBLE_FRACTION * floor_s
    if impossible:
        why = (
            f"IMPOSSIBLE: {time_ms:.4g} ms is under the physical floor {floor_s * 1e3:.4g} ms "
            f"({bytes_moved:.3g} B at {ceilings.best_bandwidth_gbps:.0f} GB/s, {flops:.3g} FLOP at "
            f"{ceilings.best_flops_tflops:.3g} TFLOP/s): the call is not doing the declared work, "
            "or the timing is fooled"
        )
    return Roofline(
        achieved_gflops=flops / seconds / 1e9,
        achieved_gbps=bytes_moved / seconds / 1e9,
        pct_of_peak_flops=100 * flops / seconds / (ceilings.flops_tflops * 1e12),
        pct_of_peak_bandwidth=100 * bytes_moved / seconds / (ceilings.bandwidth_gbps * 1e9),
        arithmetic_intensity=flops / bytes_moved if bytes_moved > 0 else float("inf"),
        bound=bound,
        roofline_ms=roof_s * 1e3,
        floor_ms=floor_s * 1e3,
        is_impossible=impossible,
        explanation=why + f" (ceilings: {ceilings.source})",
    )
