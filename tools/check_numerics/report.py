"""check_numerics, last step: the summary line and the artifacts (histogram, worst cases)."""

from __future__ import annotations

import io
import json


def summary(name: str, verdict: str, cases: list, findings: list) -> str:
    failed = [c for c in cases if c.verdict != "pass"]
    errors = [f for f in findings if f.severity == "error"]
    worst = max((c for c in cases if c.errors), default=None, key=_badness)
    parts = [f"{verdict.upper()}: {name} on {len(cases)} case(s), {len(failed)} failed"]
    if worst is not None:
        e = worst.errors
        rel = "undefined" if e.rel_l2_error is None else f"{e.rel_l2_error:.3g}"
        nonfinite = ""
        if e.nonfinite_mismatches:
            nonfinite = f"{e.nonfinite_mismatches} NaN/Inf where the reference is finite, "
        parts.append(f"worst case {worst.case}: {nonfinite}rel L2 {rel} vs tolerance {worst.tolerance_rel_l2:.3g} "
                     f"({worst.tolerance_source}), worst element {e.worst_index}")
    if errors:
        parts.append("findings: " + ", ".join(sorted({f.code for f in errors})))
    return "; ".join(parts)


def _badness(case) -> tuple:
    e = case.errors
    ratio = float("inf") if e.rel_l2_error is None else e.rel_l2_error / case.tolerance_rel_l2
    return (case.verdict == "fail", e.nonfinite_mismatches > 0, ratio)


def histogram_png(series: dict[str, list[float]]) -> bytes:
    """Per-element error, log10(|cand - ref| / (|ref| + rms(ref))), one line per case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    plotted = 0
    for label, values in series.items():
        v = np.asarray(values, dtype=np.float64)
        v = np.clip(np.log10(np.clip(v[np.isfinite(v)], 1e-20, None)), -20, 1)  # >= 10x off piles up at 1
        if v.size:
            ax.hist(v, bins=60, range=(-20, 1), histtype="step", label=f"{label} ({np.sum(~np.isfinite(values))} "
                                                                       f"NaN/Inf)")
            plotted += 1
    ax.set_xlabel("log10 per-element error, |cand - ref| / (|ref| + rms(ref))")
    ax.set_ylabel("elements")
    ax.set_yscale("log")
    ax.set_title("check_numerics: per-element error (worst trial per case)")
    if plotted:
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no finite errors to plot (all NaN/Inf)", ha="center", transform=ax.transAxes)
    buf = io.BytesIO()
    fig.subplots_adjust(left=0.08, right=0.98, top=0.93, bottom=0.11)  # fixed margins: tight_layout costs ~0.3 s
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def worst_json(cases: list, partition_rows: dict) -> str:
    data = [{
        "case": c.case, "verdict": c.verdict, "seeds": c.seeds,
        "worst": c.errors.model_dump() if c.errors else None,
        "partition": json_safe(partition_rows.get(c.case) or {}) or None,
    } for c in cases]
    return json.dumps(data, indent=2)


def json_safe(value):
    """JSON has no Infinity/NaN: undefined numbers (e.g. rel L2 against an all-zero
    reference) travel as null; the NaN/Inf counts say what happened."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
