"""What sweep_serve's `expect` conditions may name: the sweep's answer as a whole, and each measured
config's numbers at its highest load meeting the SLO (a per-config condition must hold in every
config; a config that never met the SLO has nulls there, so a condition on it is inconclusive)."""

from __future__ import annotations

from ..common.expect import Catalogue, ExpectFields, Facts
from .schema import ConfigAnswer, Input, Output

PER_CONFIG = (
    "highest_load",
    "goodput",
    "output_throughput",
    "output_throughput_per_user",
    "complete",
)


def _said(name: str) -> str:
    return Output.model_fields[name].description or ""


CATALOGUE = Catalogue(
    fields={
        "best": _said("best"),
        "best_value": _said("best_value"),
        "num_configs": _said("num_configs"),
        "num_measured": "Configs whose engine started and climbed the ladder.",
        "num_dropped": "Configs whose engine did not start.",
        "num_not_tried": "Configs the budget left out.",
        "front_size": "Points on the Pareto front.",
        "partial": _said("partial"),
        "measured_steps": _said("measured_steps"),
        "reused_steps": _said("reused_steps"),
        "decided": _said("decided"),
        "race_ratio": "The race's ratio, winner / runner-up of its metric (null: no race).",
        "kept_out_steps": "Steps kept out of the SLO verdicts (warm cache, starved client, one "
        "wave), count.",
    },
    scoped={name: ConfigAnswer.model_fields[name].description or "" for name in PER_CONFIG},
    scope_kind="config",
)


def facts(inp: Input, out: Output, evidence: None) -> Facts:
    fields = {
        "best": out.best,
        "best_value": out.best_value,
        "num_configs": out.num_configs,
        "num_measured": len(out.configs),
        "num_dropped": len(out.dropped),
        "num_not_tried": len(out.not_tried),
        "front_size": len(out.front),
        "partial": out.partial,
        "measured_steps": out.measured_steps,
        "reused_steps": out.reused_steps,
        "decided": out.decided,
        "race_ratio": out.race.ratio if out.race is not None else None,
        "kept_out_steps": sum(bool(s.excluded) for c in out.configs for s in c.steps),
    }
    scopes = {c.label: {name: getattr(c, name) for name in PER_CONFIG} for c in out.configs}
    return Facts(fields=fields, scopes=scopes)


EXPECT = ExpectFields(CATALOGUE, facts)
