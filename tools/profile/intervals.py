"""Interval arithmetic over [start, end) pairs in ns: merge, subtract, and the overlap sweep.

The sweep is the method of HTA's get_comm_comp_overlap (merge each set's intervals, walk
a line over their endpoints where set A adds 1 and set B adds 2; the time spent at 3 is
the overlap), extended to also give the longest stretch where one set ran without the other.
"""

from __future__ import annotations

from dataclasses import dataclass

Interval = tuple[int, int]


def merge(intervals: list[Interval]) -> list[Interval]:
    """Sorted, non-overlapping union of the intervals (empty ones dropped)."""
    out: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def total(intervals: list[Interval]) -> int:
    return sum(e - s for s, e in intervals)


def subtract(keep: list[Interval], remove: list[Interval]) -> list[Interval]:
    """Parts of merged `keep` not covered by merged `remove`."""
    out, j = [], 0
    for start, end in keep:
        cursor = start
        while j < len(remove) and remove[j][1] <= cursor:
            j += 1
        k = j
        while k < len(remove) and remove[k][0] < end:
            if remove[k][0] > cursor:
                out.append((cursor, remove[k][0]))
            cursor = max(cursor, remove[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Parts covered by both merged lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


@dataclass
class Sweep:
    a_ns: int  # time A was active
    b_ns: int
    both_ns: int
    longest_a_only_ns: int  # the longest stretch where A was active and B not
    longest_b_only_ns: int


def sweep(a: list[Interval], b: list[Interval]) -> Sweep:
    """Overlap of two interval sets (each merged first)."""
    events = sorted(
        [(s, 1) for s, _ in merge(a)]
        + [(e, -1) for _, e in merge(a)]
        + [(s, 2) for s, _ in merge(b)]
        + [(e, -2) for _, e in merge(b)]
    )
    level, last = 0, None
    spent = {1: 0, 2: 0, 3: 0}
    run = {1: 0, 2: 0}  # length of the current A-only (1) / B-only (2) stretch
    longest = {1: 0, 2: 0}
    for t, delta in events:
        if last is not None and t > last and level:
            spent[level] += t - last
            for side in (1, 2):
                run[side] = run[side] + (t - last) if level == side else 0
                longest[side] = max(longest[side], run[side])
        elif last is not None and t > last:
            run = {1: 0, 2: 0}
        level += delta
        last = t
    return Sweep(
        a_ns=spent[1] + spent[3],
        b_ns=spent[2] + spent[3],
        both_ns=spent[3],
        longest_a_only_ns=longest[1],
        longest_b_only_ns=longest[2],
    )
