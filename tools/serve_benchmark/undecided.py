"""Why a criterion came out inconclusive, and what would decide it.

A comparison such as `ttft_p50 <= 1.05 * baseline.ttft_p50` is decided only when the two
sides' intervals ([min, max] over repeats, scaled as the condition scales them) do not
overlap. When they do, the note names the side whose spread reaches further across the gap
between the two medians, and estimates what would separate them:

- More repeats cannot: a [min, max] interval only widens as repeats are added.
- More requests per repeat can, when the repeats differ by request-sampling noise: a
  percentile over n requests varies as 1/sqrt(n), so both spreads shrink by s when the
  requests grow by 1/s^2. The intervals separate when the spreads shrink to
  s = gap / (left reach + right reach), each reach measured from its median toward the other
  side: about num_requests / s^2 requests per repeat. A host whose speed drifts between
  repeats does not obey 1/sqrt(n); alternating repeats (baseline_handle) share such drift.
"""

from __future__ import annotations

import math
import re

from ..common.expect import HypothesisAnswer

_OPERATOR = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*")
MAX_REQUEST_FACTOR = 100  # beyond this, the difference is inside the noise for any affordable run


def explain(criteria: HypothesisAnswer, num_requests: int) -> list[str]:
    """Notes for every inconclusive comparison of two numbers with spreads (each also appended to
    its comparison's reason)."""
    notes = []
    for condition in criteria.conditions:
        for comp in condition.comparisons:
            if comp.answer != "inconclusive" or not _numbers(comp.left, comp.right):
                continue
            if comp.left_interval is None and comp.right_interval is None:
                continue
            left_text, right_text = _sides(comp.comparison)
            note = why(
                left_text,
                comp.left,
                comp.left_interval,
                right_text,
                comp.right,
                comp.right_interval,
                num_requests,
            )
            comp.reason = f"{comp.reason}; {note}" if comp.reason else note
            notes.append(f"{condition.condition}: {note}")
    return notes


def why(
    left_text: str,
    left: float,
    left_interval: list[float] | None,
    right_text: str,
    right: float,
    right_interval: list[float] | None,
    num_requests: int,
) -> str:
    """Which side's spread keeps the comparison open, and the requests per repeat that would
    close it."""
    l_lo, l_hi = left_interval or (left, left)
    r_lo, r_hi = right_interval or (right, right)
    # each side's reach from its median toward the other's
    if left <= right:
        left_reach, right_reach = l_hi - left, right - r_lo
    else:
        left_reach, right_reach = left - l_lo, r_hi - right
    culprit = left_text if left_reach >= right_reach else right_text
    text = (
        f"{left_text} spans {l_lo:.4g}-{l_hi:.4g} over its repeats, {right_text} "
        f"{r_lo:.4g}-{r_hi:.4g}; {culprit}'s spread reaches furthest across the "
        f"{abs(left - right):.4g} between the medians"
    )
    if left == right:
        return text + (
            "; the medians sit on the threshold, so no amount of data decides it: the "
            "change is the size of the criterion's margin"
        )
    shrink = abs(left - right) / (left_reach + right_reach)
    factor = 1 / shrink**2
    text += ". More repeats cannot decide it (a [min, max] over repeats only widens)"
    if factor > MAX_REQUEST_FACTOR:
        return text + (
            f"; it would take over {MAX_REQUEST_FACTOR}x the requests per repeat: the "
            "difference lies inside the noise of this host"
        )
    return text + (
        f"; about {math.ceil(num_requests * factor)} requests per repeat would (now "
        f"{num_requests}; the spreads shrinking as 1/sqrt(requests)), or "
        "baseline_handle= so that both sides share the host's drift"
    )


def _numbers(*values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _sides(comparison: str) -> tuple[str, str]:
    parts = _OPERATOR.split(comparison, maxsplit=1)
    return (parts[0], parts[2]) if len(parts) == 3 else ("the left side", "the right side")
