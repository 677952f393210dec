"""The sweep's answer from its candidates and races: per shape the winner and its ties, the best
config across shapes, every config's fate, the summary line, the CSV and the plot."""

from __future__ import annotations

import math

from ..common.sweep import Config, csv_text, label
from .race import Race
from .schema import ConfigResult, ShapeWinner
from .stages import Candidate, shape_key


def shape_winners(races: list[Race]) -> list[ShapeWinner]:
    out = []
    for r in races:
        winner = r.winner
        out.append(
            ShapeWinner(
                shape=r.shape,
                winner=winner.config if winner else None,
                winner_median_ms=winner.medians.get(shape_key(r.shape)) if winner else None,
                decided=r.decided,
                undecided_because=r.undecided_because(),
                tied_with=r.ties(),
                rounds=r.rounds,
                timing_ms=r.timing_ms,
            )
        )
    return out


def config_results(candidates: list[Candidate], shapes: list[dict]) -> list[ConfigResult]:
    keys = [shape_key(s) for s in shapes]
    out = []
    for c in candidates:
        out.append(
            ConfigResult(
                config=c.config,
                stage=c.stage,
                dropped=c.dropped,
                registers_per_thread=c.compile_facts.get("registers_per_thread"),
                spill_stores_bytes=c.compile_facts.get("spill_stores_bytes"),
                median_ms={k: c.medians[k] for k in keys if k in c.medians},
                geomean_ms=_geomean([c.medians[k] for k in keys]) if _on_all(c, keys) else None,
                trials=c.trials,
            )
        )
    return out


def best_config(
    rows: list[ConfigResult], winners: list[ShapeWinner]
) -> tuple[Config | None, float | None]:
    """The config that won every shape, else the lowest geometric-mean median among configs still
    standing and timed on every shape (medians from separate pairs: a ranking, not a race)."""
    won = {label(w.winner) for w in winners if w.winner is not None}
    if len(won) == 1 and all(w.winner is not None for w in winners):
        only = next(r for r in rows if label(r.config) in won)
        return only.config, only.geomean_ms
    timed = [r for r in rows if r.geomean_ms is not None and r.dropped is None]
    if not timed:
        return None, None
    best = min(timed, key=lambda r: r.geomean_ms or math.inf)
    return best.config, best.geomean_ms


def summary(
    kernel: str, candidate: str, dtype: str, device: str, tried: int, size: int, winners, best
) -> str:
    parts = [
        f"sweep_kernel {kernel} ({candidate}, {dtype}, {device}): {tried} of {size} configs tried"
    ]
    for w in winners:
        shape = shape_key(w.shape)
        if w.winner is None:
            why = w.undecided_because
            parts.append(f"{shape}: undecided ({why})" if why else f"{shape}: no config survived")
            continue
        how = (
            "decided"
            if w.decided
            else f"undecided: {w.undecided_because}"
            if w.undecided_because and not w.tied_with
            else f"not decided ({len(w.tied_with)} tied)"
        )
        parts.append(f"{shape}: {label(w.winner)} {_ms(w.winner_median_ms)}, {how}")
    if best is not None:
        parts.append(f"best across shapes: {label(best)}")
    if device == "cpu":
        parts.append("CPU timings of interpreted Triton rank CPU work, not GPU speed")
    return "; ".join(parts) + "."


def csv_rows(rows: list[ConfigResult], winners: list[ShapeWinner]) -> str:
    wins: dict[str, list[str]] = {}
    for w in winners:
        if w.winner is not None:
            wins.setdefault(label(w.winner), []).append(shape_key(w.shape))
    table = []
    for r in rows:
        table.append(
            {
                **{f"cfg.{k}": v for k, v in r.config.items()},
                "stage": r.stage,
                "dropped": r.dropped or "",
                "registers_per_thread": r.registers_per_thread,
                "spill_stores_bytes": r.spill_stores_bytes,
                **{f"median_ms[{k}]": v for k, v in r.median_ms.items()},
                "geomean_ms": r.geomean_ms,
                "wins": " ".join(wins.get(label(r.config), [])),  # every shape it won
                "trials": " ".join(r.trials),
            }
        )
    return csv_text(table)


def plot_panels(rows: list[ConfigResult], winners: list[ShapeWinner]) -> list[dict]:
    panels = []
    for w in winners:
        key = shape_key(w.shape)
        tied = {label(t.config) for t in w.tied_with}
        win = label(w.winner) if w.winner else None
        bars = [
            (
                label(r.config),
                r.median_ms[key],
                "winner"
                if label(r.config) == win
                else "tied"
                if label(r.config) in tied
                else "other",
            )
            for r in rows
            if key in r.median_ms
        ]
        panels.append({"title": key, "bars": bars})
    return panels


def _on_all(c: Candidate, keys: list[str]) -> bool:
    return bool(keys) and all(k in c.medians for k in keys)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _ms(value: float | None) -> str:
    return f"{value:.4g} ms" if value is not None else ""
