"""Measure this device's ceilings once: copy bandwidth and matmul rate per dtype.

The parent caches the result under the device fingerprint, so this runs once per
machine. Every number is the best of several timed repetitions: a ceiling is what the
hardware can do, not what it did on average while others were using it.

CPU: a copy of a buffer several times the last-level cache (DRAM bandwidth), a copy of
a buffer that fits in L2 (cache bandwidth: the physical floor for data that stays in
cache), and a float32 torch matmul. CUDA: a large device-to-device copy and a large
matmul per dtype, timed with events.

Also the device helpers other ops share: `fingerprint`, `cache_bytes`, `clocks`.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from ..context import JobContext
from ..shared import cpu_model, meminfo_bytes

REPEATS = 7


def run(payload: dict, ctx: JobContext) -> dict:
    import torch

    device = ctx.device
    result = {"device": fingerprint(device), "clocks": clocks(device)}
    if device == "cuda":
        result.update(_cuda_peaks(torch, payload, ctx))
    else:
        result.update(_cpu_peaks(torch, payload, ctx))
    return result


def fingerprint(device: str) -> dict:
    """What identifies the hardware and software a measurement belongs to."""
    import torch

    info = {
        "device": device,
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "cpu_cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "machine": platform.machine(),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(
            {
                "name": props.name,
                "capability": f"{props.major}.{props.minor}",
                "num_sms": props.multi_processor_count,
                "memory_bytes": int(props.total_memory),
                "cuda": torch.version.cuda,
            }
        )
    else:
        info["name"] = info["cpu"]
        info["memory_bytes"] = meminfo_bytes("MemTotal")
    return info


def cache_bytes(device: str) -> int:
    """The largest cache between the cores and memory (L2 on a GPU, the LLC on a CPU)."""
    if device == "cuda":
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return int(getattr(props, "L2_cache_size", 0) or 50 << 20)
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = f.read_text().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * mult)
        except (OSError, ValueError):
            continue
    return max(sizes, default=32 << 20)


def clocks(device: str) -> dict:
    """Clock readings when the platform exposes them (best effort; empty if not)."""
    out: dict = {}
    if device == "cuda":
        import torch

        try:
            out["sm_clock_mhz"] = int(torch.cuda.clock_rate())  # needs pynvml / amdsmi
        except Exception:
            pass
        return out
    try:
        mhz = [
            float(line.split(":")[1])
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("cpu MHz")
        ]
        if mhz:
            out["cpu_mhz_min"], out["cpu_mhz_max"] = min(mhz), max(mhz)
    except OSError:
        pass
    governor = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    if governor.is_file():
        out["governor"] = governor.read_text().strip()
    return out


def _best_seconds(fn, repeats: int = REPEATS, inner: int = 1) -> float:
    fn()  # first touch: page faults and lazy init are not the hardware's speed
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def _cpu_peaks(torch, payload: dict, ctx: JobContext) -> dict:
    # The same thread count microbench times with (one, by default), so a kernel's
    # "% of peak" compares like with like.
    torch.set_num_threads(int(payload.get("cpu_threads", 1)))
    llc = cache_bytes("cpu")
    dram_bytes = int(payload.get("copy_bytes") or max(4 * llc, 64 << 20))
    src = torch.ones(dram_bytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    copy_s = _best_seconds(lambda d=dst, s=src: d.copy_(s))
    del src, dst
    ctx.progress(1, 3, "DRAM copy measured")

    small = torch.ones((256 << 10) // 4, dtype=torch.float32)  # 256 KiB: fits in L2
    small_dst = torch.empty_like(small)
    cache_s = _best_seconds(lambda: small_dst.copy_(small), inner=200)
    ctx.progress(2, 3, "cache copy measured")

    n = int(payload.get("matmul_n") or 1024)
    a, b = torch.randn(n, n), torch.randn(n, n)
    mm_s = _best_seconds(lambda: torch.mm(a, b), repeats=5)
    ctx.progress(3, 3, "matmul measured")
    return {
        # a copy reads and writes every byte
        "copy_gbps": 2 * dram_bytes / copy_s / 1e9,
        "cache_copy_gbps": 2 * small.numel() * 4 / cache_s / 1e9,
        "matmul_tflops": {"float32": 2 * n**3 / mm_s / 1e12},
        "threads": torch.get_num_threads(),
        "method": f"{torch.get_num_threads()} thread(s), best of {REPEATS}: torch copy of {dram_bytes >> 20} MiB (> "
        f"LLC {llc >> 20} MiB), "
        f"copy of 256 KiB x200, float32 torch.mm {n}x{n}",
    }


def _cuda_peaks(torch, payload: dict, ctx: JobContext) -> dict:
    def best_event_seconds(fn, repeats: int = 10) -> float:
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        return best

    copy_bytes = int(payload.get("copy_bytes") or 1 << 30)
    src = torch.ones(copy_bytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    copy_s = best_event_seconds(lambda d=dst, s=src: d.copy_(s))
    del src, dst
    ctx.progress(1, 5, "device copy measured")

    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means IEEE float32 here
    tflops = {}
    try:
        for i, (name, dtype, n) in enumerate(
            [
                ("float32", torch.float32, 4096),
                ("float16", torch.float16, 8192),
                ("bfloat16", torch.bfloat16, 8192),
            ]
        ):
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            tflops[name] = 2 * n**3 / best_event_seconds(lambda a=a, b=b: torch.mm(a, b)) / 1e12
            del a, b
            ctx.progress(2 + i, 5, f"{name} matmul measured")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    return {
        "copy_gbps": 2 * copy_bytes / copy_s / 1e9,
        "matmul_tflops": tflops,
        "method": f"best of 10 with CUDA events: device copy of {copy_bytes >> 20} MiB, "
        "torch.mm 4096^2 float32 (TF32 off), 8192^2 float16/bfloat16",
    }
