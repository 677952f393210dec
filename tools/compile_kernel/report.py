"""compile_kernel, step 4: the diff against a baseline, the summary line, compiler
diagnostics as a compiler prints them, and what the numbers cannot be trusted for.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..common.diff import Change
from ..common.diff import diff as diff_fields
from .schema import KernelResources

_NOT_DIFFED = ("name", "signature", "occupancy.blocks_by")
_COUNTS = ("instruction_mix.", "constexprs.")  # absent on one side: 0 of them


def diff(baseline: KernelResources, candidate: KernelResources) -> list[Change]:
    """Every field that differs (before: the baseline, after: this compile)."""
    return diff_fields(baseline.model_dump(), candidate.model_dump(), skip=_NOT_DIFFED, absent_as_zero=_COUNTS,
                       keep_empty=False)


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
            parts.append(f"{label} {ch.before:g}→{ch.after:g}")
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
