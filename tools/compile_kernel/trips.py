"""Trip counts of a Triton kernel's `for` loops, read off its TTIR and the launch's scalars.

`for v0 in range(0, V, BLOCK_V)` becomes `scf.for %v0 = %c0_i32 to %V step %c32_i32`: the
bounds are constants (constexprs are folded in), kernel arguments (whose values the
launch on the spec's example shape passed), or integer arithmetic on those. When every
bound resolves, the trip count is ceil((ub - lb) / step); otherwise it is unknown, with the
reason (a bound read from memory or from program_id). The loop is named by the source
line of its `for` statement, which is also what nvdisasm -g puts on a SASS loop's back edge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

_FOR = re.compile(r"scf\.for %[\w.$-]+ = (%[\w.$-]+) to (%[\w.$-]+) step (%[\w.$-]+)")
_CONSTANT = re.compile(r"^\s*(%[\w.$-]+) = arith\.constant (-?\d+) : i\d+")
_BINARY = re.compile(r"^\s*(%[\w.$-]+) = arith\.(\w+) (%[\w.$-]+), (%[\w.$-]+) : i\d+")
_LOC_REF = re.compile(r"loc\((#loc\d*)\)\s*$")
_LOC_DEF = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$")
_FILE_LINE = re.compile(r'^"([^"]+)":(\d+):\d+$')
_FUNC_ARG = re.compile(r"[(,]\s*%([\w.$-]+): ")
_NAMED = re.compile(r'^"[^"]*"\((#loc\d*)\)$')
_CALLSITE = re.compile(r"^callsite\((#loc\d*) at (#loc\d*)\)$")

_OPS = {
    "addi": lambda a, b: a + b,
    "subi": lambda a, b: a - b,
    "muli": lambda a, b: a * b,
    "divsi": lambda a, b: int(a / b),
    "divui": lambda a, b: a // b,
    "ceildivsi": lambda a, b: -(-a // b),
    "floordivsi": lambda a, b: a // b,
    "remsi": lambda a, b: a % b,
    "maxsi": max,
    "minsi": min,
}


@dataclass
class TritonLoop:
    source: str | None  # "file.py:line" of the `for` statement
    trip_count: int | None
    how: str  # "range(0, V=128, 32)" or why it is unknown


def triton_loops(ttir: str, scalar_args: dict[str, int]) -> list[TritonLoop]:
    """Every scf.for in the TTIR, in order, with its trip count where the bounds resolve."""
    values: dict[str, int] = {f"%{name}": v for name, v in scalar_args.items()}
    names: dict[str, str] = {f"%{name}": name for name in scalar_args}
    locs = dict(m.groups() for line in ttir.splitlines() if (m := _LOC_DEF.match(line)))
    func = next((line for line in ttir.splitlines() if "tt.func" in line), "")
    # bounds waiting on an argument the launch did not show: {ssa value: argument name}
    unset_args = {f"%{a}": a for a in _FUNC_ARG.findall(func) if f"%{a}" not in values}
    open_fors: list[tuple[int, TritonLoop]] = []
    loops: list[TritonLoop] = []
    depth = 0
    for line in ttir.splitlines():
        if m := _CONSTANT.match(line):
            values[m.group(1)] = int(m.group(2))
        elif (m := _BINARY.match(line)) and m.group(2) in _OPS:
            result, a, b = m.group(1), m.group(3), m.group(4)
            if a in values and b in values:
                try:
                    values[result] = _OPS[m.group(2)](values[a], values[b])
                except ZeroDivisionError:
                    pass
            elif waiting := unset_args.get(a) or unset_args.get(b):
                unset_args[result] = waiting
        if m := _FOR.search(line):
            loop = _loop(m.groups(), values, names, unset_args)
            loops.append(loop)
            open_fors.append((depth, loop))
        stripped = line.strip()
        if stripped.startswith("}"):
            depth -= 1
            if (
                open_fors and open_fors[-1][0] == depth
            ):  # this brace closes a for: its loc is the for's
                _, loop = open_fors.pop()
                if ref := _LOC_REF.search(stripped):
                    loop.source = _file_line(ref.group(1), locs)
        if stripped.endswith("{"):
            depth += 1
    return loops


def _loop(
    bounds: tuple[str, str, str],
    values: dict[str, int],
    names: dict[str, str],
    unset_args: dict[str, str],
) -> TritonLoop:
    unknown = [b for b in bounds if b not in values]
    if unknown and unknown[0] in unset_args:
        return TritonLoop(
            None,
            None,
            f"unknown: the bound depends on {unset_args[unknown[0]]}, a kernel "
            "argument whose value "
            "this compile did not see (compile with kernel= so the spec's launcher runs on its "
            "example shape, or give loop_trip_counts=)",
        )
    if unknown:
        return TritonLoop(
            None,
            None,
            f"unknown: the bound {unknown[0]} is computed in the kernel (loaded, or "
            "from program_id), not a constant or scalar argument of the launch",
        )
    lb, ub, step = (values[b] for b in bounds)
    if step <= 0:
        return TritonLoop(None, None, f"unknown: step {step} is not positive")
    shown = [f"{names[b]}={values[b]}" if b in names else str(values[b]) for b in bounds]
    return TritonLoop(None, max(0, -(-(ub - lb) // step)), f"range({', '.join(shown)})")


def _file_line(ref: str, locs: dict[str, str], hops: int = 0) -> str | None:
    text = locs.get(ref)
    if text is None or hops > 32:
        return None
    if m := _FILE_LINE.match(text):
        return f"{PurePosixPath(m.group(1)).name}:{m.group(2)}"
    if m := _NAMED.match(text):
        return _file_line(m.group(1), locs, hops + 1)
    if m := _CALLSITE.match(
        text
    ):  # a loop in an inlined helper: the helper's own line, as SASS line info has it
        return _file_line(m.group(1), locs, hops + 1)
    return None
