"""compile_kernel, step 4: the diff against a baseline, the summary line, compiler
diagnostics as a compiler prints them, and what the numbers cannot be trusted for.
"""

from __future__ import annotations

import re
from pathlib import Path

from .schema import Change, KernelResources

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
