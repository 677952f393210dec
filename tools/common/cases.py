"""Cases per call: the same case twice is the same evidence twice, and every case is a
sandbox job's worth of time, so tools deduplicate what they were given and refuse more
than a fixed number of cases with an error that says the cap (docs/limits.md)."""

from __future__ import annotations

import json
from typing import Any

from ..base import AgentError

MAX_NUMERICS_CASES = 64  # check_numerics: distinct shapes x distinct dtypes
MAX_MICROBENCH_SHAPES = 16  # microbench: distinct shapes, each timed for budget_ms


def distinct(items: list[Any]) -> list[Any]:
    """`items` without repeats, first occurrence kept (dicts compare by content)."""
    seen, out = set(), []
    for item in items:
        key = json.dumps(item, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def check_case_count(num_cases: int, limit: int, what: str) -> None:
    if num_cases > limit:
        raise AgentError(
            f"{num_cases} distinct {what} in one call; the cap is {limit} per call: split them "
            "over several calls (each is its own experiment, compare them with compare_experiments)"
        )
