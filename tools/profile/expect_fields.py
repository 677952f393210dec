"""What profile's `expect` conditions may name: the window, the findings, the threads, and the
overlap of any two range sets, judged after the run over the same events the judge read (so a
condition may name a pair the call did not ask overlap= for).
"""

from __future__ import annotations

from ..common.expect import Catalogue, ExpectError, ExpectFields, Facts
from . import judge
from .schema import Input, Output

CATALOGUE = Catalogue(
    fields={
        "window_ms": "profiled wall time, ms",
        "finding_codes": "the findings' codes (a list)",
        "num_threads": "threads seen",
    },
    functions={
        "overlap_fraction(a, b)": "share of range set a's active time during which set b was active too, "
        "0..1 (running basis when threads were sampled); a and b are range names joined by | "
        "(wildcards * and ?), "
        "e.g. overlap_fraction('kv_transfer', 'dispatch|combine') >= 0.5"
    },
)


def facts(inp: Input, out: Output, ev: judge.Evidence) -> Facts:
    """`ev`: the judged events and host samples of this call's window (run() hands them back)."""

    def overlap_fraction(*sets):
        if len(sets) != 2 or not all(isinstance(s, str) for s in sets):
            raise ExpectError(
                "overlap_fraction takes two range sets as strings, e.g. "
                "overlap_fraction('kv_transfer', 'dispatch|combine') >= 0.5"
            )
        return judge.overlap_fraction(ev, *sets)

    return Facts(
        fields={
            "window_ms": out.window_ms,
            "finding_codes": out.finding_codes,
            "num_threads": out.num_threads,
        },
        functions={"overlap_fraction": overlap_fraction},
    )


EXPECT = ExpectFields(CATALOGUE, facts)
