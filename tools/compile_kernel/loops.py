"""The loops in a SASS listing: which instructions run once and which run once per trip.

Static instruction counts count a loop body once; what a program executes is the body
times its trip count. A loop is found the way a compiler finds one: split the function
into basic blocks, compute dominators, and every branch back to a block that dominates
it (a back edge) closes a natural loop (Aho, Lam, Sethi, Ullman, "Compilers", 9.6).
Dominance, not "a branch to a lower address", tells a loop from the out-of-line code
(BRA.DIV slow paths, the `.L: BRA .L` trap after EXIT) that jumps backwards without
looping. Pure text parsing of nvdisasm -c [-g] output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from .sass import SASS_SECTION, sass_mix

# "/*0c40*/   @!P0 BRA `(.L_x_0) ;" -> address, guard, opcode, operands
_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T\d]+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*)")
_LABEL = re.compile(r"^([.\w$]+):\s*$")
_LINE_INFO = re.compile(r'//## File "([^"]+)", line (\d+)')
_TARGET_LABEL = re.compile(r"`?\(([.\w$]+)\)")
_TARGET_ADDRESS = re.compile(r"\b0x([0-9a-f]+)\b")
_PREDICATE_OPERAND = re.compile(r"(?:^|[\s,!])U?P[T\d]\b")


@dataclass
class Instruction:
    address: int
    opcode: str
    operands: str
    guarded: bool
    source: str | None  # "file.py:line" from nvdisasm -g, None without line info
    target: int | None = None  # a branch's destination address


@dataclass
class SassLoop:
    header_address: int  # first instruction of the loop (the back edges' target)
    end_address: int  # last instruction of the body (usually the back-edge branch)
    source: str | None  # source line of the back-edge branch, e.g. "kda_decode_triton.py:94"
    body: list[Instruction]  # inner loops' instructions included, once
    parent: int | None = None  # index of the innermost enclosing loop
    depth: int = 0  # 0: outermost
    mix: dict = field(default_factory=dict)


def find_loops(text: str) -> dict[str, list[SassLoop]]:
    """Per function in the listing: its loops, outermost first, in address order."""
    return {name: _natural_loops(insns) for name, insns in _functions(text).items()}


def _functions(text: str) -> dict[str, list[Instruction]]:
    out: dict[str, list[Instruction]] = {}
    labels: dict[str, int] = {}
    pending: list[str] = []
    current = None
    source = None
    for line in text.splitlines():
        if m := SASS_SECTION.match(line):
            current = out.setdefault(m.group(1), [])
            source = None
        elif m := _LINE_INFO.search(line):
            source = f"{PurePosixPath(m.group(1)).name}:{m.group(2)}"
        elif m := _LABEL.match(line.strip()):
            pending.append(m.group(1))
        elif current is not None and (m := _INSN.search(line)):
            address = int(m.group(1), 16)
            for label in pending:
                labels[label] = address
            pending.clear()
            if not m.group(3).startswith("NOP"):
                current.append(
                    Instruction(address, m.group(3), m.group(4), bool(m.group(2)), source)
                )
    for insns in out.values():
        for insn in insns:
            if _is_branch(insn):
                if m := _TARGET_LABEL.search(insn.operands):
                    insn.target = labels.get(m.group(1))
                elif m := _TARGET_ADDRESS.search(insn.operands):
                    insn.target = int(m.group(1), 16)
    return out


def _is_branch(insn: Instruction) -> bool:
    return insn.opcode.split(".", 1)[0] in ("BRA", "JMP")


def _ends_block(insn: Instruction) -> bool:
    return _is_branch(insn) or insn.opcode.split(".", 1)[0] in ("EXIT", "RET", "BRX", "JMX")


def _falls_through(insn: Instruction) -> bool:
    """A guarded or predicate-taking branch/exit may not be taken; a plain BRA/EXIT always is."""
    if not _ends_block(insn):
        return True
    return insn.guarded or ".DIV" in insn.opcode or bool(_PREDICATE_OPERAND.search(insn.operands))


def _blocks(insns: list[Instruction]) -> tuple[list[list[Instruction]], dict[int, set[int]]]:
    """Basic blocks in address order and each block's successors (block indices)."""
    targets = {i.target for i in insns if i.target is not None}
    blocks: list[list[Instruction]] = []
    for n, insn in enumerate(insns):
        if not blocks or insn.address in targets or _ends_block(insns[n - 1]):
            blocks.append([])
        blocks[-1].append(insn)
    start = {b[0].address: n for n, b in enumerate(blocks)}
    succ: dict[int, set[int]] = {}
    for n, block in enumerate(blocks):
        last = block[-1]
        succ[n] = set()
        if last.target in start:
            succ[n].add(start[last.target])
        if _falls_through(last) and n + 1 < len(blocks):
            succ[n].add(n + 1)
    return blocks, succ


def _dominators(succ: dict[int, set[int]]) -> dict[int, set[int]]:
    """dom[b]: the blocks every path from the entry (block 0) to b passes; reachable blocks only."""
    reachable, stack = {0}, [0]
    while stack:
        for s in succ[stack.pop()]:
            if s not in reachable:
                reachable.add(s)
                stack.append(s)
    pred = {b: {p for p in reachable if b in succ[p]} for b in reachable}
    dom = {b: set(reachable) for b in reachable}
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for b in sorted(reachable - {0}):
            new = {b} | set.intersection(*(dom[p] for p in pred[b])) if pred[b] else {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return dom


def _natural_loops(insns: list[Instruction]) -> list[SassLoop]:
    if not insns:
        return []
    blocks, succ = _blocks(insns)
    dom = _dominators(succ)
    bodies: dict[int, set[int]] = {}  # header block -> body blocks (back edges to one header merge)
    latch: dict[int, int] = {}  # header block -> its last back-edge block
    for tail in dom:
        for head in succ[tail]:
            if head in dom[tail]:  # tail -> head is a back edge
                body = bodies.setdefault(head, {head})
                stack = [tail]
                while stack:
                    b = stack.pop()
                    if b not in body:
                        body.add(b)
                        stack.extend(p for p in dom if b in succ[p])
                latch[head] = max(latch.get(head, tail), tail)
    headers = sorted(bodies)
    loops = []
    for head in headers:
        body = [i for b in sorted(bodies[head]) for i in blocks[b]]
        back_edge = blocks[latch[head]][-1]
        loops.append(
            SassLoop(
                header_address=blocks[head][0].address,
                end_address=max(i.address for i in body),
                source=back_edge.source,
                body=body,
                mix=sass_mix((i.opcode, i.operands) for i in body),
            )
        )
    for n, head in enumerate(
        headers
    ):  # the innermost enclosing loop is the smallest body that holds this one
        enclosing = [
            m for m, other in enumerate(headers) if m != n and bodies[head] < bodies[other]
        ]
        if enclosing:
            loops[n].parent = min(enclosing, key=lambda m: len(bodies[headers[m]]))
    for loop in loops:
        parent = loop.parent
        while parent is not None:
            loop.depth += 1
            parent = loops[parent].parent
    return loops
