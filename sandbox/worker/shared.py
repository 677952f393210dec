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


def ratio_decision(low: float, high: float, margin: float) -> str | None:
    """What a ratio's interval [low, high] (time / a leader's) decides in a race: "slower" (wholly
    above 1), "faster" (wholly below), "tie" (wholly within `margin` of 1), else None. One rule for
    the race's judge (tools/sweep_kernel/race.py) and microbench's early stop (the worker's loop)."""
    if low > 1.0:
        return "slower"
    if high < 1.0:
        return "faster"
    if 1 - margin <= low and high <= 1 + margin:
        return "tie"
    return None


def nested_self_times(spans) -> list[tuple]:
    """(key, self time, total time) of each span of a trace, from (thread, start, duration,
    name, key) tuples, as torch's key_averages counts them: a span's self time is its duration
    less that of the spans directly inside it on its thread (the trace nests them by time), and
    a span whose only child has its own name (a dispatch to an overload: aten::div_ inside
    aten::div_) counts once (torch's EventList._remove_dup_nodes). Times in the spans' unit."""
    by_thread: dict = {}
    for span in spans:
        by_thread.setdefault(span[0], []).append(span)
    out = []
    for events in by_thread.values():
        events.sort(key=lambda e: (e[1], -e[2]))
        roots: list[list] = []
        stack: list[list] = []  # open spans: [name, end, duration, children, key]
        for _, start, duration, name, key in events:
            while stack and stack[-1][1] <= start:
                stack.pop()
            node = [name, start + duration, duration, [], key]
            (stack[-1][3] if stack else roots).append(node)
            stack.append(node)
        todo = roots
        while todo:
            node = todo.pop()
            while len(node[3]) == 1 and node[3][0][0] == node[0]:
                node[3] = node[3][0][3]
            out.append((node[4], max(0.0, node[2] - sum(c[2] for c in node[3])), node[2]))
            todo += node[3]
    return out
