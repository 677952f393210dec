"""compile_kernel, step 3b: from static counts to executed ones.

Each SASS loop (loops.py) gets a trip count: the agent's loop_trip_counts=, else the TTIR
scf.for on the same source line with its bounds resolved against the launch's scalars
(trips.py), else unknown. With every trip count known, a program executes per thread

    static + sum over loops L of (trip_L - 1) x product of its ancestors' trips x static(body L)

(a body already counts once in the static mix; an inner loop runs trip_L times per trip of
its parent). Per output element: x threads_per_block / outputs_per_program, the grid and
the output's size read off the intercepted launch on the spec's example shape.
"""

from __future__ import annotations

from collections import Counter

from ..base import AgentError
from .loops import SassLoop
from .schema import ExecutedEstimate, InstructionMix, KernelResources, LaunchShape, LoopReport
from .trips import TritonLoop

ASSUMES = (
    "every thread issues every instruction of the code it passes (predicated-off lanes and "
    "divergent branches count in full), each loop runs its trip count for every program, and a "
    "pipelined loop's peeled prologue/epilogue counts on top of the trips"
)


def attach(
    kernel: KernelResources,
    sass_loops: list[SassLoop],
    triton: list[TritonLoop],
    launch: dict | None,
    given: dict[str, int] | None,
) -> KernelResources:
    """The kernel with its loops, launch and executed estimate filled in."""
    kernel.loops = [_report(n, loop, sass_loops, triton) for n, loop in enumerate(sass_loops)]
    _apply_given(kernel.loops, given or {})
    kernel.launch = _launch(launch)
    if all(loop.trip_count is not None for loop in kernel.loops):
        kernel.executed_estimate = _estimate(kernel)
    return kernel


def _report(
    n: int, loop: SassLoop, sass_loops: list[SassLoop], triton: list[TritonLoop]
) -> LoopReport:
    base = dict(
        index=n,
        source=loop.source,
        header_address=f"0x{loop.header_address:04x}",
        end_address=f"0x{loop.end_address:04x}",
        depth=loop.depth,
        parent=loop.parent,
        body=InstructionMix(**loop.mix),
    )
    if loop.source is None:
        return LoopReport(
            **base,
            trip_count_from="unknown",
            trip_count_how="unknown: the SASS has no line "
            "info to tie this loop to a `for` statement; give loop_trip_counts=",
        )
    same_line = [t for t in triton if t.source == loop.source]
    twins = sum(1 for other in sass_loops if other.source == loop.source)
    if not same_line:
        return LoopReport(
            **base,
            trip_count_from="unknown",
            trip_count_how="unknown: no Triton `for` on "
            f"{loop.source} (CUDA C++, or a loop the compiler made); give loop_trip_counts=",
        )
    if len(same_line) != 1 or twins != 1:
        why = (
            f"unknown: {len(same_line)} Triton loops and {twins} SASS loops sit on {loop.source} (the "
            "compiler versioned, peeled or merged them); give loop_trip_counts="
        )
        return LoopReport(**base, trip_count_from="unknown", trip_count_how=why)
    (t,) = same_line
    return LoopReport(
        **base,
        trip_count=t.trip_count,
        trip_count_from="ttir" if t.trip_count is not None else "unknown",
        trip_count_how=t.how,
    )


def _apply_given(loops: list[LoopReport], given: dict[str, int]) -> None:
    for key, trips in given.items():
        chosen = [loop for loop in loops if key in (str(loop.index), loop.source)]
        if not chosen:
            listed = ", ".join(f"{loop.index} ({loop.source})" for loop in loops) or "none"
            raise AgentError(
                f"loop_trip_counts names loop {key!r}, which this kernel's SASS does not have; "
                f"its loops (index (source line)): {listed}"
            )
        if trips < 0:
            raise AgentError(f"loop_trip_counts[{key!r}] = {trips}: a trip count is 0 or more")
        for loop in chosen:
            loop.trip_count, loop.trip_count_from, loop.trip_count_how = (
                trips,
                "given",
                "loop_trip_counts=",
            )


def _launch(raw: dict | None) -> LaunchShape | None:
    if not raw or not raw.get("grid"):
        return None
    programs = 1
    for g in raw["grid"]:
        programs *= g
    output, elements = next(iter((raw.get("outputs") or {}).items()), (None, None))
    per_program = elements / programs if elements and programs else None
    return LaunchShape(
        grid=raw["grid"],
        programs=programs,
        output=output,
        output_elements=elements,
        outputs_per_program=per_program,
        scalar_args=raw.get("scalar_args") or {},
    )


def _estimate(kernel: KernelResources) -> ExecutedEstimate:
    total = _as_counts(kernel.instruction_mix)
    for loop in kernel.loops:
        weight = loop.trip_count - 1
        parent = loop.parent
        while parent is not None:
            weight *= kernel.loops[parent].trip_count
            parent = kernel.loops[parent].parent
        _add(total, _as_counts(loop.body), weight)
    per_thread = InstructionMix(**{**total, "counts": "executed_estimate"})
    per_output = None
    launch = kernel.launch
    if launch is not None and launch.outputs_per_program:
        scale = kernel.threads_per_block / launch.outputs_per_program
        per_output = {
            name: round(value * scale, 3) for name, value in total.items() if isinstance(value, int)
        }
    return ExecutedEstimate(per_thread=per_thread, per_output=per_output, assumes=ASSUMES)


def _as_counts(mix: InstructionMix) -> dict:
    return {
        name: Counter(value) if isinstance(value, dict) else value
        for name, value in mix.model_dump().items()
        if name != "counts"
    }


def _add(acc: dict, counts: dict, weight: int) -> None:
    for name, value in counts.items():
        if isinstance(value, Counter):
            for key, n in value.items():
                acc[name][key] += n * weight
        else:
            acc[name] += value * weight
