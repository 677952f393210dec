"""Device ceilings, measured once per device and cached under its fingerprint.

The `peaks` worker op measures copy bandwidth and matmul rate (see
sandbox/worker/ops/peaks.py). Results go to ``<state_dir>/peaks.json``, keyed by a
hash of the device fingerprint (device name, memory, cores, torch and CUDA versions),
so a new GPU or a new torch measures again and nothing stale is reused. Datasheet
numbers exist only as a fallback when measuring fails, and say so in their `source`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from ...sandbox.job import Job
from ...sandbox.worker.protocol import OP_PEAKS
from ..base import ToolContext

PEAKS_FILE = "peaks.json"
FINGERPRINT_FIELDS = (
    "device",
    "name",
    "capability",
    "memory_bytes",
    "cpu",
    "cpu_cores",
    "torch",
    "cuda",
)
PEAKS_TIMEOUT_S = 300.0

# Dense (no sparsity) vendor numbers: HBM GB/s, TFLOP/s per dtype. Most specific first.
DATASHEET = [
    ("h100 pcie", 2000.0, {"float32": 51.0, "float16": 756.0, "bfloat16": 756.0}),
    ("h100", 3350.0, {"float32": 67.0, "float16": 989.0, "bfloat16": 989.0}),
    ("h200", 4800.0, {"float32": 67.0, "float16": 989.0, "bfloat16": 989.0}),
    ("a100-sxm4-80gb", 2039.0, {"float32": 19.5, "float16": 312.0, "bfloat16": 312.0}),
    ("a100", 1555.0, {"float32": 19.5, "float16": 312.0, "bfloat16": 312.0}),
    ("l40s", 864.0, {"float32": 91.6, "float16": 362.0, "bfloat16": 362.0}),
    ("l4", 300.0, {"float32": 30.3, "float16": 121.0, "bfloat16": 121.0}),
]


def fingerprint_key(fingerprint: dict) -> str:
    stable = {k: fingerprint.get(k) for k in FINGERPRINT_FIELDS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:16]


def load_cached(state_dir: Path, fingerprint: dict) -> dict | None:
    return _read(Path(state_dir)).get(fingerprint_key(fingerprint))


def store(state_dir: Path, record: dict) -> None:
    """Add one device's record; a temp file and a rename, so readers never see half."""
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    table = _read(state_dir)
    table[fingerprint_key(record["device"])] = record
    tmp = state_dir / f".{PEAKS_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
    os.replace(tmp, state_dir / PEAKS_FILE)


def datasheet(fingerprint: dict) -> dict | None:
    """Vendor numbers for a known GPU, labelled as such; None for CPUs and unknown GPUs."""
    if fingerprint.get("device") != "cuda":
        return None
    name = str(fingerprint.get("name", "")).lower()
    for key, bandwidth, rates in DATASHEET:
        if key in name:
            return {
                "device": fingerprint,
                "copy_gbps": bandwidth,
                "matmul_tflops": dict(rates),
                "source": f"datasheet ({key}; not measured on this machine)",
            }
    return None


async def device_peaks(
    ctx: ToolContext,
    fingerprint: dict | None = None,
    *,
    node: str | None = None,
    refresh: bool = False,
) -> tuple[dict | None, str]:
    """The ceilings for the device jobs run on, and a note on where they came from.

    With a `fingerprint` (from a job that already ran) the cache answers without a
    job. Otherwise, or with `refresh`, the peaks op runs (a few seconds on a CPU): on `node`,
    the cluster node that job ran on, when it ran on one.
    """
    state_dir = ctx.workspace.state_dir
    if fingerprint is not None and not refresh:
        cached = load_cached(state_dir, fingerprint)
        if cached is not None:
            return (
                cached,
                f"measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(cached['measured_at']))}, cached",
            )
    await ctx.progress(0, 1, "measuring this device's ceilings once (copy bandwidth, matmul rate)")
    res = await ctx.sandbox.run(
        Job(op=OP_PEAKS, kind="timing", timeout_s=PEAKS_TIMEOUT_S, node=node),
        progress=ctx.progress,
    )
    record = _validated(res.result) if res.ok else None
    if record is None:
        why = f"the peaks job {res.status}: {res.error or 'malformed result'}"
        return _unmeasured(fingerprint, why, "no ceilings, so no roofline")
    store(state_dir, record)  # right for the device it ran on, whichever that was
    if fingerprint is not None and fingerprint_key(record["device"]) != fingerprint_key(
        fingerprint
    ):
        # Not this device's ceilings (a job on a cluster whose nodes differ, not pinned to the
        # node that asked, landed on another kind): cached for theirs, not used here.
        why = (
            f"the ceilings job ran on another device ({_words(record['device'])}) than this "
            f"call's ({_words(fingerprint)}): its ceilings are cached for that device, not used here"
        )
        return _unmeasured(
            fingerprint, why, "no roofline this time (a later call may measure this device)"
        )
    return record, "measured now"


def _unmeasured(fingerprint: dict | None, why: str, otherwise: str) -> tuple[dict | None, str]:
    """No measured ceilings for this device (`why`): its datasheet's where there is one, else
    none, and the note says which."""
    fallback = datasheet(fingerprint) if fingerprint else None
    if fallback is not None:
        return fallback, why + "; using datasheet numbers"
    return None, f"{why}; {otherwise}"


def _words(fingerprint: dict) -> str:
    """A device in a few words: its name (or CPU) and cores."""
    name = fingerprint.get("name") or fingerprint.get("cpu") or fingerprint.get("device") or "?"
    cores = fingerprint.get("cpu_cores")
    return f"{name}, {cores} cores" if cores and fingerprint.get("device") != "cuda" else str(name)


def _validated(raw: dict) -> dict | None:
    """The op's numbers as floats, or None when anything is missing or not a positive number."""
    try:
        rates = {str(k): float(v) for k, v in raw["matmul_tflops"].items()}
        record: dict[str, Any] = {
            "device": dict(raw["device"]),
            "clocks": dict(raw.get("clocks") or {}),
            "copy_gbps": float(raw["copy_gbps"]),
            "matmul_tflops": rates,
            "method": str(raw.get("method", "")),
            "source": "measured",
            "measured_at": time.time(),
        }
        if raw.get("cache_copy_gbps") is not None:
            record["cache_copy_gbps"] = float(raw["cache_copy_gbps"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    numbers = [record["copy_gbps"], *rates.values(), record.get("cache_copy_gbps", 1.0)]
    if not rates or not all(math.isfinite(x) and x > 0 for x in numbers):
        return None
    return record


def _read(state_dir: Path) -> dict:
    try:
        table = json.loads((state_dir / PEAKS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}
