"""profile's findings: what to act on, the layer it lives in, and the next cheapest experiment."""

from __future__ import annotations

from . import intervals as iv
from . import judge
from .jobs import Watch
from .judge import Evidence
from .schema import Contention, Finding, GilWait, OverlapStat

NO_OVERLAP_BELOW = (
    0.1  # overlap fraction (either side's) under which two range sets "never" ran together ...
)
BELOW_CHANCE = (
    0.25  # ... and under this share of the overlap that chance alone would give them (a short, rare
)
# range overlaps a long one little even when nothing keeps them apart)
GIL_BELOW_CHANCE = (
    2 / 3
)  # with the GIL evidence below as a second, independent witness, under this share. A GIL
# held through the other's ranges leaves only edge overlap: the waiter runs the moment the holder's range ends, and
# ~1 ms host samples put part of that inside it, more where the waiter runs in short bursts (replay 2, 3 s windows
# on 2 shared cores: held GIL 7-24% of chance over 10 runs here, idle and beside two CPU hogs, above 25% in three
# clones where the 0.25 gate alone missed it, and 51% in one CI run on a slower host, where a 0.5 gate left the
# profile silent; released 90-118%, where the GIL evidence is weak anyway: the holder held it 2-3% of the window)
OVERLAP_GOAL = 0.5  # the overlap a pipelined pair is expected to reach (the rerun's expect below)
BUSY_ENOUGH = (
    0.05  # each set's ranges open at least this share of the window for that to mean anything
)
GIL_WAIT_FROM = 0.3  # share of the waiter's range time blocked on a futex while the other set ran
GIL_HELD_FROM = 0.3  # share of the window the other thread was sampled holding the GIL ...
GIL_HELD_IN_RANGES = (
    0.8  # ... or at least this much of the share of the window its ranges were open (a holder
)
# busy for a fifth of the window cannot hold the GIL for 30% of it; py-spy's counts carry no times, so the GIL
# share is over the whole window and this compares like with like)


def contention(
    ev: Evidence, watch: Watch, pairs: list[tuple[str, str]], rate_hz: int
) -> Contention:
    waits = [w for a, b in pairs for w in judge.gil_waits(ev, a, b) + judge.gil_waits(ev, b, a)]
    if watch.spy is not None and not watch.spy.error:
        spy = f"py-spy record --gil --nonblocking at {rate_hz} Hz (GIL holder read from the interpreter's memory)"
    else:
        spy = f"not run: {watch.spy.error if watch.spy is not None else watch.problem or 'sampling off'}"
    samples = watch.proc.num_samples if watch.proc is not None else 0
    priority = (
        "at real-time priority"
        if watch.proc is not None and watch.proc.realtime
        else "at normal priority (on a busy host it may see transitions late)"
    )
    return Contention(
        method="from the host, outside the job: /proc/<pid>/task/<tid>/{stat,wchan,schedstat} read ~1000 times a "
        f"second by a sampler thread {priority} (state R less run-queue waits = on a CPU; asleep on a "
        "futex = waiting for the GIL or a lock), on CLOCK_MONOTONIC, the clock the job's ranges use; plus "
        "the GIL holder counted per thread by py-spy",
        proc_samples=samples,
        gil_sampler=spy,
        waits=waits,
        limits="A futex wait is the GIL or a lock: it is read as the GIL only when the other thread was sampled "
        "holding the GIL for much of the window (py-spy counts samples per thread, without times, so the "
        "holder share is over the whole window, not per range). State samples miss events shorter than "
        "~1 ms; a stretch of under 2.5 ms on a CPU between two futex waits counts as the wait (a GIL "
        f"waiter's periodic re-check); the holder is sampled every {1000 / rate_hz:.1f} ms.",
    )


def findings(
    ev: Evidence,
    overlaps: list[OverlapStat],
    cont: Contention | None,
    watch: Watch,
    raw: dict,
    sampled: bool,
) -> list[Finding]:
    out = [f for o in overlaps for f in _no_overlap(ev, o, cont)]
    if sampled and watch.proc is None:
        out.append(
            Finding(
                code="threads_not_sampled",
                layer="profiler",
                message=f"threads were not watched from outside: {watch.problem}",
                evidence="no host samples",
                next_experiment="overlap used the raw intervals; GIL findings need host sampling "
                "(the server must run as root or with CAP_SYS_PTRACE, with py-spy installed)",
            )
        )
    left = [t for t in raw.get("alive_after_return") or [] if isinstance(t, dict)]
    if left:
        names = ", ".join(f"{t.get('name')} ({t.get('tid')})" for t in left[:5])
        out.append(
            Finding(
                code="threads_left_running",
                layer="workload",
                message=f"threads still running when the entry returned: {names}; their work after "
                "the window is not in this profile (they were killed with the job)",
                evidence="threading.enumerate() after the entry returned",
                next_experiment="join the threads the step starts before the entry returns",
            )
        )
    if raw.get("ranges_dropped"):
        out.append(
            Finding(
                code="ranges_dropped",
                layer="profiler",
                message=f"{raw['ranges_dropped']} ranges "
                "past the recorder's cap were counted but not kept",
                evidence="range recorder cap",
                next_experiment="profile a shorter step or put spans around coarser work",
            )
        )
    return out


def _no_overlap(ev: Evidence, o: OverlapStat, cont: Contention | None) -> list[Finding]:
    fractions = [f for f in (o.a_overlap_fraction, o.b_overlap_fraction) if f is not None]
    busy = min(o.a_in_ranges_ms, o.b_in_ranges_ms) * 1e6 / ev.window_ns
    chance_ms = (
        o.a_active_ms * o.b_active_ms * 1e6 / ev.window_ns
    )  # expected both-time were they independent
    if set(o.a_threads) & set(o.b_threads) or not fractions or busy < BUSY_ENOUGH:
        return []
    worst, gil_explains = _pair_gil_wait(ev, o, cont)
    undecided = (
        _starved_undecided(ev, o, cont, worst, gil_explains)
        if min(fractions) < OVERLAP_GOAL
        else []
    )
    if min(fractions) >= NO_OVERLAP_BELOW or o.both_ms >= GIL_BELOW_CHANCE * chance_ms:
        return undecided
    if not gil_explains and o.both_ms >= BELOW_CHANCE * chance_ms:
        return undecided
    said = (
        f"`{o.b}` ({', '.join(o.b_threads)}) overlapped `{o.a}` ({', '.join(o.a_threads)}) "
        f"{100 * (o.b_overlap_fraction or 0):.1f}% of its {o.b_active_ms:.0f} ms, `{o.a}` overlapped `{o.b}` "
        f"{100 * (o.a_overlap_fraction or 0):.1f}% of its {o.a_active_ms:.0f} ms ({o.basis} time; both sets' "
        f"ranges were open {o.a_in_ranges_ms:.0f} and {o.b_in_ranges_ms:.0f} ms of the {ev.window_ns / 1e6:.0f} ms "
        f"window; together {o.both_ms:.1f} ms, where chance alone would give ~{chance_ms:.0f} ms)"
    )
    rerun = f"rerun this profile with expect [\"overlap_fraction('{o.a}', '{o.b}') >= 0.5\"]"
    if not gil_explains:
        return [
            Finding(
                code="no_overlap",
                layer="scheduling",
                message=said + "; no GIL holder explains it",
                evidence=f"overlap sweep over {o.basis} intervals"
                + (f"; {cont.gil_sampler}" if cont else ""),
                next_experiment="check what each thread waits for (a lock, a queue, an event) and "
                f"start the work of one while the other runs; {rerun}",
            )
        ]
    holder_tid = int(worst.holder.rsplit("(", 1)[1].rstrip(")"))
    doing = judge.holder_activity(ev, holder_tid, worst.holder_ranges)
    if doing == "running":
        fix = (
            f"the holder runs Python inside `{worst.holder_ranges}`: move that work into one native or torch "
            "call that releases the GIL (one tensor copy instead of a per-block Python loop), or into another "
            "process"
        )
    else:
        fix = (
            f"the holder waits ({doing}) inside `{worst.holder_ranges}` with the GIL held: release the GIL in "
            "the native call (Py_BEGIN_ALLOW_THREADS / py::gil_scoped_release; ctypes.CDLL, not PyDLL)"
        )
    message = (
        f"{said}; {worst.holder} held the GIL {100 * worst.holder_gil_share:.0f}% of the window, its "
        f"`{worst.holder_ranges}` ranges being open {100 * _holder_open_share(ev, o, worst):.0f}% of it (most "
        f"often at {worst.holder_gil_site}) while {worst.waiter} sat blocked on it "
        f"{100 * worst.fraction:.0f}% of its `{worst.waiter_ranges}` time (measured while "
        f"{worst.holder} was inside `{worst.holder_ranges}`)"
    )
    return [
        Finding(
            code="gil_contention",
            layer="python/GIL",
            message=message,
            evidence=f"{cont.gil_sampler}; waiter blocked on a futex per /proc samples ({cont.proc_samples} "
            f"rounds); {cont.limits}",
            next_experiment=f"{fix}; then {rerun}",
        )
    ]


def _pair_gil_wait(
    ev: Evidence, o: OverlapStat, cont: Contention | None
) -> tuple[GilWait | None, bool]:
    """The longest GIL wait between the two range sets (None without one), and whether it
    explains their low overlap: the waiter blocked on the GIL at least GIL_WAIT_FROM of its time
    while the other side held it."""
    worst = max(
        (
            w
            for w in (cont.waits if cont else [])
            if {w.waiter_ranges, w.holder_ranges} == {o.a, o.b}
        ),
        key=lambda w: w.fraction,
        default=None,
    )
    explains = worst is not None and worst.fraction >= GIL_WAIT_FROM and _held_the_gil(ev, o, worst)
    return worst, explains


def _starved_undecided(
    ev: Evidence,
    o: OverlapStat,
    cont: Contention | None,
    worst: GilWait | None,
    gil_explains: bool,
) -> list[Finding]:
    """overlap_undecided, where the threads of either range set waited for a CPU at least as
    long as they ran and the GIL witness does not rule the GIL out (or there is none): on such a
    window the running-time overlap measures the host as much as the code, so neither a
    no_overlap/gil_contention verdict nor silence would be honest. Empty when the window is not
    starved or unsampled, or when the waiter barely blocked on the GIL or the other side barely
    held it (the host then explains the low overlap, as before). `worst`, `gil_explains`:
    _pair_gil_wait's."""
    if cont is not None and not gil_explains:  # the GIL witness rules the GIL out
        return []

    def shares(threads: list[str]) -> tuple[float, float]:
        tids = [int(t.rsplit("(", 1)[1].rstrip(")")) for t in threads if t.endswith(")")]
        states = [ev.states.get(tid, {}) for tid in tids]
        ran = sum(iv.total(st.get("running", [])) for st in states) / ev.window_ns
        queued = sum(iv.total(st.get("cpu_wait", [])) for st in states) / ev.window_ns
        return ran, queued

    sides = {o.a: shares(o.a_threads), o.b: shares(o.b_threads)}
    starved = {name: rq for name, rq in sides.items() if rq[1] > 0 and rq[1] >= rq[0]}
    if not starved:
        return []
    said = "; ".join(
        f"`{name}`'s threads waited for a CPU {100 * queued:.0f}% of the window and ran "
        f"{100 * ran:.0f}%"
        for name, (ran, queued) in starved.items()
    )
    gil = (
        f"; the GIL witness: {worst.waiter} blocked on a futex {100 * worst.fraction:.0f}% of its "
        f"`{worst.waiter_ranges}` time while {worst.holder} held the GIL "
        f"{100 * worst.holder_gil_share:.0f}% of the window"
        if worst
        else ""
    )
    overlap = min(o.a_overlap_fraction or 0, o.b_overlap_fraction or 0)
    return [
        Finding(
            code="overlap_undecided",
            layer="host",
            message=f"`{o.a}` and `{o.b}` overlapped {100 * overlap:.0f}% "
            f"(the smaller side's share of its {o.basis} time), but the window was CPU-starved: "
            f"{said}{gil}. Neither 'they run together' nor 'something keeps them apart' can be "
            "read off this window",
            evidence="host samples of each thread's state (running vs queued for a CPU)",
            next_experiment="profile again on a quieter host (fewer busy processes than cores) or "
            "with a longer window, and read overlap_fraction and the GIL waits then",
        )
    ]


def _held_the_gil(ev: Evidence, o: OverlapStat, wait) -> bool:
    return wait.holder_gil_share >= min(
        GIL_HELD_FROM, GIL_HELD_IN_RANGES * _holder_open_share(ev, o, wait)
    )


def _holder_open_share(ev: Evidence, o: OverlapStat, wait) -> float:
    """Share of the window the holder's range set was open, 0..1."""
    open_ms = o.a_in_ranges_ms if wait.holder_ranges == o.a else o.b_in_ranges_ms
    return open_ms * 1e6 / ev.window_ns


INTERPRETER_FRAME = "triton/runtime/interpreter"  # py-spy's short file name of Triton's interpreter
INTERPRETED_FROM = 0.05  # share of the sampled window in the interpreter that makes it the story
# py-spy samples the window must have had room for before their share says anything: py-spy that
# attached after the window closed (or never) sampled none of it, which is no evidence either way
INTERPRETED_MIN_SAMPLES = 10
OPS_COVER_BELOW = 0.5  # ... or, without py-spy, ops covering under half the window


def interpreted_triton(
    ev: Evidence, plan, by_self: list, stacks: list, watch: Watch
) -> list[Finding]:
    """On CPU a Triton kernel runs in Triton's interpreter (TRITON_INTERPRET=1): Python and numpy that
    torch.profiler never sees. Say so, and where the time went by py-spy's stacks."""
    if plan.env.get("TRITON_INTERPRET") != "1" or plan.payload.get("target") != "kernel":
        return []
    window_ms = ev.window_ns / 1e6
    ops_ms = sum(o.self_ms for o in by_self)
    expected = ev.gil_expected_samples
    in_interp = sum(n for _, stack, n in watch.stacks if INTERPRETER_FRAME in stack)
    # too few samples is no share: the op table alone decides (below), not a share of 0
    share = in_interp / expected if expected >= INTERPRETED_MIN_SAMPLES else None
    if share is not None and share < INTERPRETED_FROM:
        return []
    if share is None and ops_ms >= OPS_COVER_BELOW * window_ms:
        return []
    top = f"top op {by_self[0].name} {by_self[0].self_ms:.2f} ms" if by_self else "no ops"
    where = (
        "; ".join(f"{100 * s.share:.0f}% {s.stack}" for s in stacks[:3])
        if stacks
        else f"py-spy did not run ({watch.spy.error if watch.spy else watch.problem or 'sampling off'})"
    )
    if share is not None:
        seen = f"py-spy found the interpreter holding the GIL {100 * min(1.0, share):.0f}% of the window"
    elif watch.spy is not None and not watch.spy.error:
        seen = (
            f"py-spy sampled only {ev.gil_sampled_ns / 1e6:.0f} ms of the window (it attached late: "
            "a busy host), too few samples to say how much of it was the interpreter"
        )
    else:
        seen = "no Python stacks were sampled"
    return [
        Finding(
            code="interpreted_triton",
            layer="profiler",
            message=(
                f"this Triton kernel ran in Triton's CPU interpreter (TRITON_INTERPRET=1): its time is Python "
                f"and numpy, invisible to torch.profiler, whose ops cover {ops_ms:.2f} ms of the "
                f"{window_ms:.0f} ms window ({top}); {seen}. Where the time went (py-spy stacks, outer -> "
                f"inner): {where}"
            ),
            evidence=f"torch.profiler op table vs py-spy GIL-holder stacks ({sum(n for *_, n in watch.stacks)} "
            "samples); the full list is python_stacks",
            next_experiment="interpreter time says nothing about the kernel on a GPU: compare implementations with "
            "microbench (CPU wall time), or profile on a GPU host for CUPTI kernel times; read "
            "python_stacks for which kernel lines the interpreter spends its time on",
        )
    ]


PYTHON_BOUND_FROM = 0.5  # share of the sampled window one thread held its process's GIL


def python_bound(ev: Evidence, plan) -> list[Finding]:
    """In an engine's window: a thread that held its process's GIL for most of it is where that
    process's Python time goes (vLLM: the API server's event loop, the engine core's busy loop,
    the worker's model runner); named by process and thread, with the frame it held it at most."""
    if plan.payload.get("target") != "serve" or not ev.gil:
        return []
    out = []
    for tid in sorted(ev.gil, key=lambda t: -(ev.gil_share(t) or 0)):
        share = ev.gil_share(tid) or 0
        if share < PYTHON_BOUND_FROM:
            break
        out.append(
            Finding(
                code="python_bound",
                layer="python/GIL",
                message=f"{ev.label(tid)} held its process's GIL {100 * share:.0f}% of the "
                f"window, most often at {ev.gil[tid].get('site', '?')}: that process's other "
                "threads get the interpreter only between its steps",
                evidence=f"py-spy GIL-holder samples at {ev.gil_rate_hz} Hz over "
                f"{ev.gil_sampled_ns / 1e6:.0f} ms of the window",
                next_experiment="read python_stacks for the frames it spends that time in; "
                "profile again with a higher load_concurrency to see whether the share grows "
                "with the batch (per-request Python) or stays (per-step Python)",
            )
        )
    return out
