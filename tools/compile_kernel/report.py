"""compile_kernel, step 4: the diff against a baseline, the summary line, compiler
diagnostics as a compiler prints them, and what the numbers cannot be trusted for.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..common.diff import Change
from ..common.diff import diff as diff_fields
from .schema import KernelResources, LoopReport

_NOT_DIFFED = (
    "name",
    "signature",
    "occupancy.blocks_by",
    "loops",
    "executed_estimate.per_thread",
    "executed_estimate.assumes",
)
_COUNTS = ("instruction_mix.", "constexprs.")  # absent on one side: 0 of them


def diff(baseline: KernelResources, candidate: KernelResources) -> list[Change]:
    """Every field that differs (before: the baseline, after: this compile)."""
    return diff_fields(
        baseline.model_dump(),
        candidate.model_dump(),
        skip=_NOT_DIFFED,
        absent_as_zero=_COUNTS,
        keep_empty=False,
    )


def describe(target: str, k: KernelResources, what: str) -> str:
    """'sm_90a: kernel (what was compiled) regs, spills, ...; loops; executed per output'."""
    spills = (
        f"{k.spill_stores_bytes} B spill stores"
        if k.spill_stores_bytes is not None
        else f"{k.spilled_registers or 0} spilled regs"
    )
    text = (
        f"{target}: {k.name} ({what}) {k.registers_per_thread} regs, {spills}, smem "
        f"{k.shared_memory_bytes} B, occupancy {k.occupancy.occupancy_pct:g}% (limit: "
        f"{k.occupancy.limiting_factor})"
    )
    if k.instruction_mix.tensor_core_mma:
        text += f", {k.instruction_mix.tensor_core_mma} tensor-core MMA"
    if k.loops:
        text += "; static counts: a loop body counts once; " + "; ".join(
            _describe_loop(loop) for loop in k.loops
        )
    estimate = k.executed_estimate
    if estimate is not None and estimate.per_output is not None:
        counts = ", ".join(
            f"{label} {estimate.per_output[name]:g}"
            for name, label in _PER_OUTPUT.items()
            if name != "tensor_core_mma" or estimate.per_output[name]
        )
        text += f"; executed per output element of {k.launch.output}: {counts}"
    elif k.loops and estimate is None:
        text += "; executed counts unknown until every loop's trip count is (loop_trip_counts=)"
    return text


_PER_OUTPUT = {
    "ffma": "FFMA",
    "fmul": "FMUL",
    "fadd": "FADD",
    "mufu": "MUFU",
    "tensor_core_mma": "MMA",
    "global_load": "LDG",
    "total": "instructions",
}  # the classes summaries name


def _describe_loop(loop: LoopReport) -> str:
    body = loop.body
    where = loop.source or loop.header_address
    trips = (
        f"{loop.trip_count} trips ({loop.trip_count_how})"
        if loop.trip_count is not None
        else "trips unknown"
    )
    return (
        f"loop {loop.index} at {where}, {trips}: body FFMA {body.ffma}, FMUL {body.fmul}, FADD {body.fadd}, "
        f"MUFU {body.mufu}, {body.total} instructions"
    )


def _executed_in(k: KernelResources, loop: LoopReport, field: str) -> int:
    """Executed count of `field` inside `loop` (its inner loops with their own trips)."""
    inner = [c for c in k.loops if c.parent == loop.index]
    own = getattr(loop.body, field) - sum(getattr(c.body, field) for c in inner)
    return loop.trip_count * (own + sum(_executed_in(k, c, field) for c in inner))


_HEADLINE = {
    "registers_per_thread": "regs",
    "spill_stores_bytes": "B spill stores",
    "spilled_registers": "spilled regs",
    "shared_memory_bytes": "B smem",
    "occupancy.occupancy_pct": "% occupancy",
    "stack_frame_bytes": "B stack",
    "instruction_mix.local_load": "LDL",
    "instruction_mix.local_store": "STL",
    "instruction_mix.tensor_core_mma": "tensor-core MMA",
    "instruction_mix.total": "instructions",
}


def describe_changes(changes: list[Change], candidate: KernelResources | None = None) -> str:
    """The headline moves, e.g. '-16 regs, tensor-core MMA 0→8, executed FFMA per output 261→1372
    (5.26x); in loop 0 at file.py:94 (4 trips, range(0, V=128, 32)): 79% of FFMA'; 'no change' when
    nothing moved."""
    parts, grew = [], []
    for ch in changes:
        label = _HEADLINE.get(ch.field)
        if ch.field.startswith("executed_estimate.per_output."):
            name = ch.field.rsplit(".", 1)[1]
            if name in _PER_OUTPUT and ch.delta:
                ratio = f" ({ch.ratio:.3g}x)" if ch.ratio is not None else ""
                parts.append(
                    f"executed {_PER_OUTPUT[name]} per output {ch.before:g}→{ch.after:g}{ratio}"
                )
                if ch.delta > 0:
                    grew.append(name)
            continue
        if label is None or ch.delta is None:
            continue
        if ch.field.startswith("instruction_mix."):
            parts.append(f"static {label} {ch.before:g}→{ch.after:g}")
        else:
            parts.append(f"{ch.delta:+g} {label}")
    if not changes:
        return "no change"
    if candidate is not None and grew:
        parts += _where_it_grew(candidate, grew)
    return ", ".join(parts) if parts else f"{len(changes)} minor fields moved (see diff)"


def _where_it_grew(k: KernelResources, grew: list[str]) -> list[str]:
    """'in loop 0 at file.py:94 (4 trips, range(0, V=128, 32)) run 79% of FFMA, ...' per outermost loop."""
    found = []
    for loop in k.loops:
        if loop.parent is not None or loop.trip_count is None:
            continue
        shares = [f"{_share(k, loop, name):.0%} of {_PER_OUTPUT[name]}" for name in grew]
        found.append(
            f"of the executed counts, loop {loop.index} at {loop.source or loop.header_address} "
            f"({loop.trip_count} trips, {loop.trip_count_how}) runs " + ", ".join(shares)
        )
    return found


def _share(k: KernelResources, loop: LoopReport, field: str) -> float:
    total = getattr(k.executed_estimate.per_thread, field)
    return _executed_in(k, loop, field) / total if total else 0.0


# ---- errors and notes ------------------------------------------------------------------


def format_diagnostic(status: str, diag: dict) -> str:
    """'file:line:col: error: message' plus the source excerpt, like a compiler prints it."""
    what = {
        "source_error": "the source failed to load",
        "compile_error": "compile error",
        "setup_error": "cannot compile as asked",
    }.get(status, status)
    where = diag.get("file") or "source"
    if diag.get("line"):
        where += f":{diag['line']}" + (f":{diag['column']}" if diag.get("column") else "")
    text = f"{where}: {what}: {diag.get('message', '')}"
    if status == "source_error" and "Permission denied" in text:
        text += (
            " (the sandbox denied it: compile jobs have no network and see the workspace read-only)"
        )
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
            found.append(
                f"{k.name} cannot launch on this target: its {k.occupancy.limiting_factor} per block "
                f"exceeds what one SM/CU offers (shared memory {k.shared_memory_bytes} B, "
                f"{k.threads_per_block} threads); a launch would fail with OutOfResources"
            )
    if (out_dir / "kernel.amdgcn").is_file():
        found.append(
            "AMDGCN loops are not analysed: the instruction counts are static (a loop body counts "
            "once) and executed_estimate is null"
        )
    unknown = [loop for k in kernels for loop in k.loops if loop.trip_count is None]
    if unknown:
        found.append(
            "executed_estimate is null: "
            + "; ".join(
                f"loop {loop.index} ({loop.source or loop.header_address}): {loop.trip_count_how}"
                for loop in unknown
            )
        )
    if any(
        k.executed_estimate is not None and k.executed_estimate.per_output is None for k in kernels
    ):
        found.append(
            "executed_estimate.per_output is null: no launch was seen (signature= given, or the grid "
            "could not be read), so programs and outputs per program are unknown; compile with "
            "kernel= so the spec's launcher runs on its example shape"
        )
    if any(k.spill_stores_bytes is None and k.spilled_registers is None for k in kernels):
        found.append("no spill numbers: ptxas -v printed no report for this kernel")
    return found


def emitted_arch(raw: dict, default: str) -> str:
    """The architecture ptxas says it compiled for (sm_90 becomes sm_90a in Triton)."""
    m = re.search(r"for '(sm_\w+)'", raw.get("ptxas_log", ""))
    return m.group(1) if m else default
