"""microbench, step 4: the parts of the answer that are not statistics: what could disturb
the numbers, the sweep plot and the summary line (the hypothesis is answered by `expect`)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from .jobs import ArmTimes
from .plan import Code
from .schema import MIN_TIMED_CALLS, ShapeResult


def cpu_counters() -> dict | None:
    """Aggregate CPU jiffies from /proc/stat (None where there is no /proc)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    values = [int(v) for v in fields]
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return dict(
        zip(names, values + [0] * (len(names) - len(values)), strict=False)
    )  # newer kernels add fields


def disturbances(
    device: str, before: dict | None, after: dict | None, threads: int | None
) -> list[str]:
    """What besides the kernel could have moved the numbers, in words."""
    notes = []
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        load1 = float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        load1 = None
    if before and after:
        total = sum(after.values()) - sum(before.values())
        busy = total - (after["idle"] - before["idle"]) - (after["iowait"] - before["iowait"])
        steal = after["steal"] - before["steal"]
        if total > 0:
            # The timing job keeps about one core busy; the rest is someone else.
            others = max(0.0, busy / total * (cores or 1) - 1.0)
            notes.append(
                f"{device.upper() if device == 'cpu' else 'host CPU'}: {cores} cores, "
                f"{busy / total:.0%} busy while timing (~{others:.1f} cores used by other processes), "
                f"{steal / total:.1%} steal (hypervisor)"
            )
            if steal / total > 0.02:
                notes.append(
                    "steal above 2%: the virtual machine shares its physical cores; "
                    "expect wider intervals"
                )
    if load1 is not None:
        notes.append(
            f"load average (1 min) {load1:.2f} on {cores} cores"
            + (": other load present" if cores and load1 > 1.0 + 0.25 * cores else "")
        )
    if device == "cpu":
        notes.append(
            f"CPU timing with {threads or '?'} torch thread(s); Triton kernels run in the "
            "interpreter, so times measure Python and numpy, not GPU hardware"
        )
    return notes


# Minor page faults per timed call above this: the call touches fresh pages (a new large
# allocation the allocator did not recycle), so its time includes the kernel's page-fault work.
FAULTS_PER_CALL_NOTABLE = 1.0


def page_fault_notes(shape: dict, arms: Sequence[Code], times: dict[str, ArmTimes]) -> list[str]:
    """Minor page faults per timed call, per arm (counted by the worker with getrusage)."""
    label = ",".join(f"{k}={v}" for k, v in shape.items())
    parts, fresh = [], False
    for arm in arms:
        stats = times[arm.name]
        calls = len(stats.samples_ns)
        if not calls or stats.minor_faults is None:
            continue
        per_call = stats.minor_faults / calls
        fresh = fresh or per_call > FAULTS_PER_CALL_NOTABLE
        parts.append(f"{arm.label} {per_call:.3g}")
    if not parts:
        return []
    note = f"minor page faults per timed call at {label}: {', '.join(parts)}"
    if fresh:
        note += (
            "; calls touch fresh pages, so times include page-fault work (the cold-allocation regime, "
            "several times slower than a warm loop for large outputs)"
        )
    else:
        note += " (warm-loop regime: the allocator recycles memory between calls)"
    return [note]


def plot_rows(results: list[ShapeResult]) -> list[dict]:
    rows = []
    for r in results:
        for arm, res in (("candidate", r.candidate), ("baseline", r.baseline)):
            if res is not None:
                rows.append(
                    {
                        "arm": f"{arm} ({res.code})",
                        "bytes": max(r.bytes_per_call, 1.0),
                        "median_ms": res.median_ms,
                        "p10_ms": res.p10_ms,
                        "p90_ms": res.p90_ms,
                        "pct_roofline": res.pct_of_roofline,
                    }
                )
    return rows


MAX_SHAPES_NAMED = 4  # in the summary line; the shapes list has them all


def _shape_text(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def what_ran(name: str, arms: Sequence[Code], results: list[ShapeResult]) -> str:
    """'kernel/candidate vs baseline, dtype, shapes [...]': what every summary line starts with."""
    vs = f" vs {arms[1].label}" if len(arms) > 1 else ""
    shapes = [_shape_text(r.shape) for r in results]
    named = "; ".join(shapes[:MAX_SHAPES_NAMED]) + (
        f"; {len(shapes) - MAX_SHAPES_NAMED} more" if len(shapes) > MAX_SHAPES_NAMED else ""
    )
    return f"{name}/{arms[0].label}{vs}, {results[-1].dtype}, {len(shapes)} shape(s) [{named}]"


def summary(name: str, arms: Sequence[Code], results: list[ShapeResult], verdict: str) -> str:
    last = results[-1]
    shape = _shape_text(last.shape)
    cand = last.candidate
    if cand.pct_of_roofline is not None:
        where = f"{cand.bound}-bound at {cand.pct_of_roofline:.3g}% of the roofline"
    else:
        where = "no roofline (ceilings unavailable)"
    text = f"{what_ran(name, arms, results)}: median {cand.median_ms:.4g} ms at {shape}, {where}."
    if verdict == "invalid":
        return text + f" INVALID timing ({'; '.join(_void_reasons(results))})."
    if len(arms) > 1:
        faster = sum(r.verdict == "faster" for r in results)
        slower = sum(r.verdict == "slower" for r in results)
        text += (
            f" {arms[0].label} vs {arms[1].label}: {verdict} (faster on {faster}, slower on {slower} of "
            f"{len(results)}); at {shape} ratio {last.ratio:.3f} [95% CI {last.ci_low:.3f}, "
            f"{last.ci_high:.3f}], minimal detectable effect {last.min_detectable_effect_pct:.1f}%."
        )
    if not math.isfinite(cand.median_ms):
        text += " (no finite median)"
    extended = [_shape_text(r.shape) for r in results if r.stop_reason == "min_calls"]
    if extended:
        text += (
            f" Calls too slow for the default budget at {'; '.join(extended)}: timed past it until every "
            f"arm had {MIN_TIMED_CALLS} timed calls (stop_reason 'min_calls'), so intervals are wide."
        )
    return text


def _void_reasons(results: list[ShapeResult]) -> list[str]:
    """Why the timing is void, one line per arm and reason."""
    reasons = set()
    for r in results:
        for arm in (r.candidate, r.baseline):
            if arm is None:
                continue
            if arm.spot_check == "failed":
                reasons.add(f"{arm.code}: spot-check failed")
            if arm.is_impossible:
                reasons.add(f"{arm.code}: impossible time")
    return sorted(reasons)
