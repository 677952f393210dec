"""Pure, stdlib-only helpers both sides of the trust boundary need: the worker (timing
loop, device facts) and the judge in ``tools/`` (statistics, provenance, memory checks).
One copy each; nothing here imports torch, numpy or an op module.
"""

from __future__ import annotations

import math
import platform
from pathlib import Path

Z95 = 1.959963984540054


def median_rel_se(samples) -> float:
    """Standard error of the median / median, from order statistics (distribution-free).

    The 95% confidence interval of a median runs between the order statistics of rank
    n/2 -+ 1.96*sqrt(n)/2 (the binomial argument); its half-width / 1.96 is the
    standard error. Skew and outliers do not inflate it the way they inflate the SD.
    """
    x = sorted(float(v) for v in samples)
    n = len(x)
    if n < 3:
        return math.inf
    half = Z95 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)) - 1)
    hi = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    median = x[n // 2] if n % 2 else (x[n // 2 - 1] + x[n // 2]) / 2
    if median <= 0:
        return math.inf
    return (x[hi] - x[lo]) / (2 * Z95) / median


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def meminfo_bytes(key: str) -> int | None:
    """A /proc/meminfo field in bytes ('MemTotal', 'MemAvailable'), None where unreadable."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
