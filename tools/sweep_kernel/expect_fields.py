"""What sweep_kernel's `expect` conditions may name: how far the sweep got (whole-call counts),
the best config across shapes, and per shape the winner, whether the race decided it, and how
many configs it could not tell from the winner.

A config is named by its label, `NAME=value` pairs in the space's order ('BLOCK_N=128
num_warps=4'), so `best == 'BLOCK_N=128 num_warps=4'` or `winner == ...` per shape states which
config a hypothesis expects to win.
"""

from __future__ import annotations

from ..common.expect import Catalogue, ExpectFields, Facts
from ..common.sweep import label
from .schema import Input, Output, ShapeWinner

WHOLE = (
    "space_size",
    "tried",
    "seen_fraction",
    "compiled",
    "passed_numerics",
    "best_geomean_ms",
    "complete",
    "trials_made",
    "trials_reused",
    "timing_ms",
    "sampler",
)
CATALOGUE = Catalogue(
    fields={
        **{name: Output.model_fields[name].description or "" for name in WHOLE},
        "best": "The best config across shapes as its label ('BLOCK_N=128 num_warps=4'); null "
        "when none was timed on every shape.",
        "dropped": "Configs dropped at compile, numerics or timing, count.",
    },
    scoped={
        "winner": "The shape's fastest config as its label, always one timed on the shape; null "
        "when none survived or none was timed (undecided).",
        "winner_median_ms": ShapeWinner.model_fields["winner_median_ms"].description or "",
        "decided": ShapeWinner.model_fields["decided"].description or "",
        "tied": "Configs the race could not tell from the winner on this shape, count.",
        "rounds": ShapeWinner.model_fields["rounds"].description or "",
    },
    scope_kind="shape",
)


def facts(inp: Input, out: Output, evidence: None) -> Facts:
    fields = {name: getattr(out, name) for name in WHOLE}
    fields["best"] = label(out.best) if out.best is not None else None
    fields["dropped"] = sum(1 for c in out.configs if c.dropped)
    scopes = {}
    for w in out.shapes:
        scopes[" ".join(f"{k}={v}" for k, v in w.shape.items())] = {
            "winner": label(w.winner) if w.winner is not None else None,
            "winner_median_ms": w.winner_median_ms,
            "decided": w.decided,
            "tied": len(w.tied_with),
            "rounds": w.rounds,
        }
    return Facts(fields=fields, scopes=scopes)


EXPECT = ExpectFields(CATALOGUE, facts)
