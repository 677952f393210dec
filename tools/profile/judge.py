"""profile's judge: from the job's raw events and the host's samples to tables, overlaps and GIL waits.

Everything the job returned is untrusted data: it is read through `_ints`/`_str`, never
executed, and the host's samples (thread states, GIL holder) are the evidence the
contention findings rest on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base import AgentError
from ..common.expect import ExpectError
from . import intervals as iv
from . import names
from .jobs import Watch
from .sampler import cpu_ns_within
from .schema import GilWait, OpRow, OverlapStat, PythonStack, RangeStat, ThreadStat


@dataclass
class Range:
    name: str
    tid: int
    start_ns: int
    end_ns: int
    cpu_ns: int | None
    source: str


@dataclass
class Evidence:
    """The job's events and the host's samples, lined up on one clock (CLOCK_MONOTONIC ns)."""

    window: tuple[int, int]
    ranges: list[Range]
    names: dict[int, str]  # tid -> thread name
    futex: dict[int, list[iv.Interval]] = field(
        default_factory=dict
    )  # tid -> blocked on a futex (merged)
    stalled: dict[int, list[iv.Interval]] = field(
        default_factory=dict
    )  # tid -> futex or waiting for a CPU
    states: dict[int, dict[str, list[iv.Interval]]] = field(default_factory=dict)
    gil: dict[int, dict] = field(
        default_factory=dict
    )  # tid -> {"samples", "site"}: py-spy's GIL-holder counts
    gil_rate_hz: int = 0
    gil_span: tuple[int, int] | None = (
        None  # when py-spy sampled (attached .. told to stop), monotonic ns
    )
    cpu_ns: dict[int, int] = field(default_factory=dict)
    sampled: bool = False
    process: dict[int, str] = field(default_factory=dict)  # tid -> the engine process it is in

    @property
    def window_ns(self) -> int:
        return max(1, self.window[1] - self.window[0])

    @property
    def gil_sampled_ns(self) -> int:
        """Time py-spy sampled inside the window, ns: it is stopped when the window closes (the export
        after it holds the GIL for seconds) and attaches some ms after it starts."""
        if self.gil_span is None:
            return self.window_ns
        return max(1, min(self.window[1], self.gil_span[1]) - max(self.window[0], self.gil_span[0]))

    @property
    def gil_expected_samples(self) -> float:
        """How many samples py-spy had room for in the window at its rate (0 when it did not run):
        the denominator of every GIL share."""
        return self.gil_rate_hz * self.gil_sampled_ns / 1e9

    def gil_share(self, tid: int) -> float | None:
        """Share of the time py-spy sampled in the window that this thread was seen holding the GIL
        (samples / (rate x sampled time)), 0..1; the shares of all threads add up to 1 at most."""
        if not self.gil or not self.gil_rate_hz:
            return None
        expected = self.gil_expected_samples
        return min(1.0, self.gil.get(tid, {}).get("samples", 0) / expected)

    def label(self, tid: int) -> str:
        where = f"{self.process[tid]}/" if self.process.get(tid) else ""
        return f"{where}{self.names.get(tid) or 'thread'} ({tid})"

    def matching(self, pattern: str) -> list[Range]:
        return [r for r in self.ranges if names.matches(pattern, r.name)]

    def running(self, ranges: list[Range]) -> list[iv.Interval]:
        """The ranges' time minus the time their thread made no progress: blocked on a futex (the GIL or
        a lock) or runnable without a CPU; waits in native code (sleep, I/O) count as the range's work."""
        out = []
        for tid in {r.tid for r in ranges}:
            mine = iv.merge([(r.start_ns, r.end_ns) for r in ranges if r.tid == tid])
            out += iv.subtract(mine, self.stalled.get(tid, [])) if self.sampled else mine
        return iv.merge(out)


def evidence(raw: dict, watch: Watch) -> Evidence:
    window = (_int(raw["window"].get("start_ns")), _int(raw["window"].get("end_ns")))
    ranges = _span_ranges(raw.get("ranges") or {}) + [
        Range(
            _str(r.get("name")),
            _int(r.get("tid")),
            _int(r.get("start_ns")),
            _int(r.get("end_ns")),
            None,
            "record_function",
        )
        for r in _dicts(raw.get("torch_ranges"))
    ]
    names = {
        _int(k): _str(v.get("name"))
        for k, v in (raw.get("threads") or {}).items()
        if isinstance(v, dict)
    }
    names.update(_span_thread_names(raw.get("ranges") or {}))
    cpu = {
        _int(k): _int(v.get("cpu_ns")) - _int(v.get("cpu_first_ns"))
        for k, v in (raw.get("threads") or {}).items()
        if isinstance(v, dict) and "cpu_ns" in v
    }  # a thread no poll saw has a name, not a time
    ev = Evidence(
        window=window, ranges=[r for r in ranges if r.end_ns >= r.start_ns], names=names, cpu_ns=cpu
    )
    for proc in watch.samplers:
        ev.sampled = True
        for track in proc.tracks.values():
            ev.names.setdefault(track.tid, track.name)
            if proc.process:
                ev.process[track.tid] = proc.process
            ev.states[track.tid] = {c: iv.merge(runs) for c, runs in track.runs.items()}
            ev.futex[track.tid] = ev.states[track.tid]["futex"]
            st = ev.states[track.tid]
            ev.stalled[track.tid] = iv.merge(st["futex"] + st["cpu_wait"] + st["other"])
            if track.ticks_seen:  # within the window only: the sampler outlives it
                ev.cpu_ns[track.tid] = cpu_ns_within(track, *window)
    ev.gil = dict(watch.gil_holders)
    ev.gil_rate_hz = watch.spy.rate_hz if watch.spy is not None else 0
    spans = [
        (spy.sampling_from_ns, spy.sampling_to_ns or window[1])
        for spy in watch.spies
        if spy.sampling_from_ns is not None
    ]
    if spans:  # one py-spy per process: their union, so no process's GIL shares add up past 1
        ev.gil_span = (min(s for s, _ in spans), max(e for _, e in spans))
    return ev


def _span_ranges(cols: dict) -> list[Range]:
    names = [_str(n) for n in cols.get("names") or []]
    rows = zip(
        cols.get("name") or [],
        cols.get("tid") or [],
        cols.get("thread") or [],
        cols.get("start_ns") or [],
        cols.get("end_ns") or [],
        cols.get("cpu_ns") or [],
        strict=False,
    )  # untrusted: may differ in length
    return [
        Range(
            names[i] if isinstance(i, int) and 0 <= i < len(names) else "?",
            _int(tid),
            _int(s),
            _int(e),
            _int(c),
            "span",
        )
        for i, tid, _, s, e, c in rows
    ]


def _span_thread_names(cols: dict) -> dict[int, str]:
    return {
        _int(t): _str(n)
        for t, n in zip(cols.get("tid") or [], cols.get("thread") or [], strict=False)
    }


def check_names(ev: Evidence, patterns: list[str], field_name: str) -> None:
    """Every pattern must name a range that ran; the error lists those that did."""
    seen = sorted({r.name for r in ev.ranges})
    for pattern in patterns:
        if not ev.matching(pattern):
            raise AgentError(
                f"{field_name}: {pattern!r} matches no range that ran; ranges seen: "
                f"{', '.join(seen) or 'none (wrap work in ia_worker.ranges.span or record_function)'}"
            )


def top_ops(rows: list, window_ns: int, top_k: int) -> tuple[list[OpRow], list[OpRow]]:
    ops = []
    for r in _dicts(rows):
        self_ms, total_ms = _num(r.get("self_us")) / 1e3, _num(r.get("total_us")) / 1e3
        ops.append(
            OpRow(
                name=_str(r.get("name")),
                input_shapes=_str(r.get("input_shapes")),
                count=_int(r.get("count")),
                self_ms=self_ms,
                total_ms=total_ms,
                self_pct=100 * self_ms * 1e6 / window_ns,
                total_pct=100 * total_ms * 1e6 / window_ns,
            )
        )
    return (
        sorted(ops, key=lambda o: -o.self_ms)[:top_k],
        sorted(ops, key=lambda o: -o.total_ms)[:top_k],
    )


def range_stats(ev: Evidence, filters: list[str]) -> list[RangeStat]:
    keep = [r for r in ev.ranges if not filters or any(names.matches(p, r.name) for p in filters)]
    groups: dict[tuple[str, str], list[Range]] = {}
    for r in keep:
        groups.setdefault((r.name, r.source), []).append(r)
    out = []
    for (name, source), rs in sorted(groups.items()):
        wall = sum(r.end_ns - r.start_ns for r in rs) / 1e6
        cpu = [r.cpu_ns for r in rs if r.cpu_ns is not None]
        out.append(
            RangeStat(
                name=name,
                source=source,
                threads=sorted({ev.label(r.tid) for r in rs}),
                count=len(rs),
                total_ms=wall,
                mean_ms=wall / len(rs),
                on_cpu_ms=sum(cpu) / 1e6 if cpu else None,
            )
        )
    return out


def thread_stats(ev: Evidence) -> list[ThreadStat]:
    window = [ev.window]
    tids = sorted({r.tid for r in ev.ranges} | set(ev.states) | set(ev.cpu_ns))
    out = []
    for tid in tids:
        in_ranges = iv.total(iv.merge([(r.start_ns, r.end_ns) for r in ev.ranges if r.tid == tid]))
        states = {
            c: iv.total(iv.intersect(runs, window)) / ev.window_ns
            for c, runs in ev.states.get(tid, {}).items()
        }
        cpu = ev.cpu_ns.get(tid)
        busy = (
            states.get("running")
            if ev.sampled and tid in ev.states
            else (cpu / ev.window_ns if cpu else None)
        )
        gil = ev.gil_share(tid)
        if cpu is not None:  # 10 ms ticks: a thread on a CPU throughout can read one tick over
            cpu = min(cpu, ev.window_ns)
        out.append(
            ThreadStat(
                tid=tid,
                name=ev.names.get(tid, ""),
                process=ev.process.get(tid, ""),
                wall_in_ranges_ms=in_ranges / 1e6,
                on_cpu_ms=cpu / 1e6 if cpu is not None else None,
                busy_fraction=min(busy, 1.0) if busy is not None else None,
                state_fractions={c: round(v, 4) for c, v in states.items()},
                gil_held_fraction=gil,
            )
        )
    return out


def overlap(ev: Evidence, a: str, b: str) -> OverlapStat:
    ra, rb = ev.matching(a), ev.matching(b)
    run = iv.sweep(ev.running(ra), ev.running(rb))
    raw = iv.sweep([(r.start_ns, r.end_ns) for r in ra], [(r.start_ns, r.end_ns) for r in rb])
    return OverlapStat(
        a=a,
        b=b,
        a_threads=sorted({ev.label(r.tid) for r in ra}),
        b_threads=sorted({ev.label(r.tid) for r in rb}),
        basis="running" if ev.sampled else "intervals",
        a_in_ranges_ms=raw.a_ns / 1e6,
        b_in_ranges_ms=raw.b_ns / 1e6,
        a_active_ms=run.a_ns / 1e6,
        b_active_ms=run.b_ns / 1e6,
        both_ms=run.both_ns / 1e6,
        a_overlap_fraction=_ratio(run.both_ns, run.a_ns),
        b_overlap_fraction=_ratio(run.both_ns, run.b_ns),
        longest_a_without_b_ms=run.longest_a_only_ns / 1e6,
        longest_b_without_a_ms=run.longest_b_only_ns / 1e6,
        interval_a_overlap_fraction=_ratio(raw.both_ns, raw.a_ns),
    )


def overlap_fraction(ev: Evidence, a: str, b: str) -> float | None:
    """For expect: overlap_fraction('kv_transfer', 'dispatch'); None (inconclusive) when A never ran."""
    try:
        check_names(
            ev,
            [names.check(a, "overlap_fraction"), names.check(b, "overlap_fraction")],
            "overlap_fraction",
        )
    except AgentError as exc:
        raise ExpectError(str(exc)) from None
    return overlap(ev, a, b).a_overlap_fraction


def gil_waits(ev: Evidence, holder_set: str, waiter_set: str) -> list[GilWait]:
    """Per (thread of one set, thread of the other): how much of the waiter's range time it sat blocked
    on a futex while the other set's ranges were open, and how much of the window the other thread was
    sampled holding the GIL (only one thread can hold it: a busy holder makes the futex the GIL)."""
    if not ev.gil or not ev.sampled:
        return []
    holders, waits = ev.matching(holder_set), []
    for waiter in sorted({r.tid for r in ev.matching(waiter_set)}):
        mine = iv.merge(
            [(r.start_ns, r.end_ns) for r in ev.matching(waiter_set) if r.tid == waiter]
        )
        for holder in sorted({r.tid for r in holders} - {waiter}):
            theirs = iv.merge([(r.start_ns, r.end_ns) for r in holders if r.tid == holder])
            both_open = iv.intersect(mine, theirs)
            blocked = iv.intersect(both_open, ev.futex.get(waiter, []))
            could_run = iv.subtract(
                mine, ev.states.get(waiter, {}).get("cpu_wait", [])
            )  # the OS's share is not ours
            waits.append(
                GilWait(
                    holder=ev.label(holder),
                    waiter=ev.label(waiter),
                    waiter_ranges=waiter_set,
                    holder_ranges=holder_set,
                    fraction=_ratio(iv.total(blocked), iv.total(could_run)) or 0.0,
                    holder_gil_share=ev.gil_share(holder) or 0.0,
                    holder_gil_site=ev.gil.get(holder, {}).get("site", ""),
                )
            )
    return waits


def holder_activity(ev: Evidence, tid: int, ranges: str) -> str:
    """What the holder mostly did inside its ranges by host samples: 'running' or a wait class."""
    mine = iv.merge([(r.start_ns, r.end_ns) for r in ev.matching(ranges) if r.tid == tid])
    spent = {c: iv.total(iv.intersect(mine, runs)) for c, runs in ev.states.get(tid, {}).items()}
    return max(spent, key=spent.get) if spent and max(spent.values()) > 0 else "unknown"


def _ratio(num: int, den: int) -> float | None:
    return num / den if den > 0 else None


def _dicts(value) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int(value) -> int:
    if isinstance(value, str) and value.isdigit():  # JSON object keys (thread ids)
        return int(value)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _num(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _str(value) -> str:
    return value[:200] if isinstance(value, str) else str(value)[:200]


STACK_FRAMES = 4  # innermost frames kept per stack row
STACK_ROWS = 8


def python_stacks(ev: Evidence, stacks: list[tuple[int, str, int]]) -> list[PythonStack]:
    """The stacks py-spy most often found holding the GIL, by their innermost frames, as shares of the
    time it sampled in the window."""
    if not stacks or not ev.gil_rate_hz:
        return []
    expected = ev.gil_expected_samples
    grouped: dict[tuple[int, str], int] = {}
    for tid, stack, count in stacks:
        tail = " -> ".join(stack.split(";")[-STACK_FRAMES:]) if stack else "?"
        grouped[(tid, tail)] = grouped.get((tid, tail), 0) + count
    top = sorted(grouped.items(), key=lambda kv: -kv[1])[:STACK_ROWS]
    return [
        PythonStack(thread=ev.label(tid), stack=_str(tail), share=min(1.0, n / expected))
        for (tid, tail), n in top
    ]
