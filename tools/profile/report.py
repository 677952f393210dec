"""profile's report: the one-line summary, a Perfetto (Chrome JSON) trace, and a timeline PNG."""

from __future__ import annotations

import io
import json

from .intervals import intersect
from .judge import Evidence
from .schema import Output

FUTEX_TRACK = 20_000_000  # pseudo thread ids: one extra track per thread for its futex waits


def summary(out: Output) -> str:
    parts = [f"{out.target}: {out.window_ms:.0f} ms window"]
    if out.top_ops_by_self:
        top = out.top_ops_by_self[0]
        parts.append(f"top op {top.name} {top.self_ms:.2f} ms self ({top.self_pct:.0f}%)")
    for o in out.overlaps:
        frac = "n/a" if o.a_overlap_fraction is None else f"{100 * o.a_overlap_fraction:.1f}%"
        parts.append(f"`{o.a}` overlapped `{o.b}` {frac} ({o.basis})")
    if "interpreted_triton" in out.finding_codes:
        parts.append(
            "interpreted Triton: its time is invisible to torch.profiler on CPU; "
            + (
                f"top Python stack {100 * out.python_stacks[0].share:.0f}%: {out.python_stacks[0].stack}"
                if out.python_stacks
                else "no Python stacks sampled"
            )
        )
    if out.load is not None:
        parts.append(f"load from {out.load.source.split(' (')[0]}")
    if out.findings:
        parts.append("findings: " + ", ".join(out.finding_codes))
    if out.hypothesis_answer.answer != "not_judged":
        parts.append(f"hypothesis {out.hypothesis_answer.answer}")
    return "; ".join(parts)


def perfetto_trace(ev: Evidence, op_events: list, pid: int) -> str:
    """Chrome trace JSON (opens in ui.perfetto.dev): ranges and CPU ops per thread, and per thread one track
    with its futex waits (host samples); times in µs from the window's start."""
    t0 = ev.window[0]
    events: list[dict] = []
    tids = sorted({r.tid for r in ev.ranges} | set(ev.states))
    for tid in tids:
        events.append(_meta(pid, tid, ev.label(tid)))
    for r in sorted(ev.ranges, key=lambda r: (r.start_ns, -r.end_ns)):
        events.append(
            _complete(r.name, r.source, pid, r.tid, r.start_ns - t0, r.end_ns - r.start_ns)
        )
    for e in op_events if isinstance(op_events, list) else []:
        if (
            isinstance(e, dict)
            and isinstance(e.get("start_ns"), int)
            and isinstance(e.get("end_ns"), int)
        ):
            events.append(
                _complete(
                    str(e.get("name"))[:200],
                    "cpu_op",
                    pid,
                    int(e.get("tid") or 0),
                    e["start_ns"] - t0,
                    e["end_ns"] - e["start_ns"],
                )
            )
    for tid, runs in ev.futex.items():
        runs = intersect(
            runs, [ev.window]
        )  # the samplers start before the window (while the job waits)
        events.append(_meta(pid, FUTEX_TRACK + tid, f"{ev.label(tid)} blocked on futex (/proc)"))
        events += [
            _complete("futex wait", "state", pid, FUTEX_TRACK + tid, s - t0, e - s) for s, e in runs
        ]
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"})


def _meta(pid: int, tid: int, name: str) -> dict:
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def _complete(name: str, cat: str, pid: int, tid: int, start_ns: int, dur_ns: int) -> dict:
    return {
        "ph": "X",
        "name": name,
        "cat": cat,
        "pid": pid,
        "tid": tid,
        "ts": start_ns / 1e3,
        "dur": dur_ns / 1e3,
    }


def timeline_png(ev: Evidence) -> bytes:
    """Named ranges per thread (one row each), with a thin red row for its futex waits when sampled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = ev.window[0]
    tids = sorted({r.tid for r in ev.ranges})
    names = sorted({r.name for r in ev.ranges})
    colors = {n: plt.cm.tab10(i % 10) for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.9 * max(1, len(tids))), dpi=100)
    labels = []
    for row, tid in enumerate(tids):
        y = len(tids) - 1 - row
        for name in names:
            bars = [
                ((r.start_ns - t0) / 1e6, (r.end_ns - r.start_ns) / 1e6)
                for r in ev.ranges
                if r.tid == tid and r.name == name
            ]
            if bars:
                ax.broken_barh(bars, (y + 0.3, 0.6), facecolors=colors[name], label=name)
        runs = intersect(ev.futex.get(tid, []), [ev.window])
        if runs:
            ax.broken_barh(
                [((s - t0) / 1e6, (e - s) / 1e6) for s, e in runs],
                (y + 0.05, 0.2),
                facecolors="red",
            )
        share = ev.gil_share(tid)
        labels.append(
            (y + 0.5, ev.label(tid) + (f"\nGIL {100 * share:.0f}%" if share is not None else ""))
        )
    ax.set_yticks([p for p, _ in labels], [n for _, n in labels])
    ax.set_xlabel(
        "ms from window start   (thin red: blocked on a futex, /proc; GIL %: py-spy holder share)"
    )
    ax.set_xlim(0, ev.window_ns / 1e6)
    handles, seen = [], set()
    for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
        if label not in seen:
            seen.add(label)
            handles.append((handle, label))
    if handles:
        ax.legend(
            *zip(*handles, strict=True), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8
        )
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
