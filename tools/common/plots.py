"""Every PNG the kernel tools draw, in one module: matplotlib (about 0.5 s to import) is
imported once, here, and this module only inside a report thread, never on the
server's import path.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import numpy as np  # noqa: E402


def histogram_png(series: dict[str, np.ndarray] | dict[str, list[float]]) -> bytes:
    """Per-element error, log10(|cand - ref| / (|ref| + rms(ref))), one line per case."""
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    plotted = 0
    for label, values in series.items():
        v = np.asarray(values, dtype=np.float64)
        v = np.clip(
            np.log10(np.clip(v[np.isfinite(v)], 1e-20, None)), -20, 1
        )  # >= 10x off piles up at 1
        if v.size:
            label_n = f"{label} ({np.sum(~np.isfinite(values))} NaN/Inf)"
            ax.hist(v, bins=60, range=(-20, 1), histtype="step", label=label_n)
            plotted += 1
    ax.set_xlabel("log10 per-element error, |cand - ref| / (|ref| + rms(ref))")
    ax.set_ylabel("elements")
    ax.set_yscale("log")
    ax.set_title("check_numerics: per-element error (worst trial per case)")
    if plotted:
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.text(
            0.5, 0.5, "no finite errors to plot (all NaN/Inf)", ha="center", transform=ax.transAxes
        )
    fig.subplots_adjust(
        left=0.08, right=0.98, top=0.93, bottom=0.11
    )  # fixed margins: tight_layout costs ~0.3 s
    return _png(fig)


def sweep_png(rows: list[dict]) -> bytes:
    """PNG: median time (p10-p90 bars) and % of roofline vs bytes moved, per arm.

    rows: one per (shape, arm): {"arm", "bytes", "median_ms", "p10_ms", "p90_ms", "pct_roofline"}.
    """
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(10, 4))
    for arm in sorted({r["arm"] for r in rows}):
        pts = sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["bytes"])
        x = [p["bytes"] for p in pts]
        med = [p["median_ms"] for p in pts]
        err = [
            [m - p["p10_ms"] for m, p in zip(med, pts, strict=True)],
            [p["p90_ms"] - m for m, p in zip(med, pts, strict=True)],
        ]
        ax_t.errorbar(x, med, yerr=err, marker="o", capsize=3, label=arm)
        if all(p["pct_roofline"] is not None for p in pts):
            ax_r.plot(x, [p["pct_roofline"] for p in pts], marker="o", label=arm)
    ax_t.set(
        xscale="log",
        yscale="log",
        xlabel="bytes moved per call",
        ylabel="median time (ms), p10-p90",
        title="time vs size",
    )
    ax_r.set(
        xscale="log",
        xlabel="bytes moved per call",
        ylabel="% of roofline (best possible time / time)",
        title="% of roofline vs size",
    )
    for ax in (ax_t, ax_r):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return _png(fig, dpi=100)


def latency_ecdf_png(series: dict[str, tuple[list[float], list[float]]]) -> bytes:
    """serve_benchmark: TTFT and ITL distributions (ECDFs), one line per run label (candidate, baseline)."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, idx, title in ((axes[0], 0, "TTFT (ms)"), (axes[1], 1, "ITL per chunk (ms)")):
        for label, values in series.items():
            v = np.sort(np.asarray(values[idx], dtype=np.float64))
            if v.size:
                ax.step(
                    v,
                    np.arange(1, v.size + 1) / v.size,
                    where="post",
                    label=f"{label} (n={v.size})",
                )
        ax.set_title(title)
        ax.set_ylabel("fraction of samples")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
        else:  # every request failed, or none streamed a second chunk (no ITL)
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.9, bottom=0.12, wspace=0.25)
    return _png(fig, dpi=100)


def _png(fig, **savefig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    plt.close(fig)
    return buf.getvalue()


def sweep_configs_png(panels: list[dict]) -> bytes:
    """sweep_kernel: one panel per shape, each config's median time as a bar (the winner dark,
    the configs the race could not tell from it mid, the rest light). panels: [{"title": str,
    "bars": [(config label, ms, "winner" | "tied" | "other")]}]."""
    shades = {"winner": "#1f4e79", "tied": "#5b9bd5", "other": "#c9d9ea"}
    n = max(len(panels), 1)
    height = max(2.5, 0.28 * max((len(p["bars"]) for p in panels), default=1) + 1.2)
    fig, axes = plt.subplots(1, n, figsize=(min(4.2 * n, 16), height), dpi=100, squeeze=False)
    for ax, panel in zip(axes[0], panels):
        bars = sorted(panel["bars"], key=lambda b: b[1])
        ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[shades[b[2]] for b in bars])
        ax.invert_yaxis()  # fastest on top
        ax.set_xlabel("median time per call, ms")
        ax.set_title(panel["title"], fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
    for ax in axes[0][len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(
        "sweep_kernel: winner (dark), not told apart from it (mid), slower (light)", fontsize=9
    )
    fig.tight_layout()
    return _png(fig)


def serve_sweep_png(
    steps: list[dict],
    front: list[tuple[float, float]],
    load_label: str,
    limits: dict[str, float | None],
) -> bytes:
    """sweep_serve: the Pareto front (tokens/s per user vs tokens/s in all, as vllm bench sweep
    plot_pareto) and, per config, every SLO metric (its worst repeat) against load: as a share of
    its limit when limits are given (1 = the limit, one line style per metric), else in ms.

    steps: one per measured step: {"label", "load", "per_user", "total", "latency": {metric:
    ms}, "slo_met"}; limits: metric (ttft_p99, ...) -> its limit in ms (None: no limit).
    """
    fig, (ax_f, ax_t) = plt.subplots(1, 2, figsize=(11, 4.5))
    labels = list(dict.fromkeys(s["label"] for s in steps))
    styles = ["o-", "s--", "^:", "d-.", "v-", "x--"]
    scaled = all(v for v in limits.values())
    for i, name in enumerate(labels):
        mine = [s for s in steps if s["label"] == name]
        colour = f"C{i % 10}"
        for met, marker in ((True, "o"), (False, "x")):
            pts = [s for s in mine if s["slo_met"] is met and s["per_user"] is not None]
            ax_f.scatter(
                [p["per_user"] for p in pts],
                [p["total"] for p in pts],
                color=colour,
                marker=marker,
                label=name if met else None,
            )
        for j, (metric, limit) in enumerate(limits.items()):
            pts = [s for s in mine if s["latency"].get(metric) is not None]
            ys = [p["latency"][metric] / (limit if scaled and limit else 1) for p in pts]
            ax_t.plot(
                [p["load"] for p in pts],
                ys,
                styles[j % len(styles)],
                color=colour,
                label=metric if i == 0 else None,
            )
    if front:
        ax_f.plot([x for x, _ in front], [y for _, y in front], "k--", label="Pareto front")
    if scaled:
        ax_t.axhline(1.0, color="r", linestyle=":", label="SLO limit")
    metrics = ", ".join(f"{m} <= {v:g} ms" if v else m for m, v in limits.items())
    ax_f.set(
        xlabel="output tokens/s per user",
        ylabel="output tokens/s in all",
        title="front (o: SLO met, x: broken)",
    )
    ax_t.set(
        xlabel=load_label,
        ylabel="worst repeat / its SLO limit" if scaled else "ms (worst repeat)",
        title=f"SLO metrics vs load ({metrics})",
    )
    ax_t.legend(fontsize=7)
    for ax in (ax_f, ax_t):
        ax.grid(True, alpha=0.3)
    ax_f.legend(fontsize=7)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.92, bottom=0.12, wspace=0.25)
    return _png(fig, dpi=100)
