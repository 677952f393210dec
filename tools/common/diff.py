"""One diff for every tool: what moved between two results, as a list of `Change`.

Both sides are flattened into dotted paths ('shapes.0.median_ms', 'instruction_mix.ffma');
a leaf whose value differs becomes a Change with the numbers side by side, and for
numbers the delta and the ratio. compare_experiments and compile_kernel's baseline=
answer in this shape, so an agent reads one kind of diff.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field


class Change(BaseModel):
    field: str = Field(
        description="Dotted path of what moved, e.g. 'shapes.0.median_ms', 'registers_per_thread', "
        "'instruction_mix.tensor_core_mma'."
    )
    before: Any = Field(
        description="Value in the baseline (the earlier one), in the field's own unit; null: absent."
    )
    after: Any = Field(description="Value in the later one, in the field's own unit; null: absent.")
    delta: float | None = Field(
        default=None,
        description="after - before, in the field's unit, when both are "
        "numbers; null for text, flags or a missing side.",
    )
    ratio: float | None = Field(
        default=None,
        description="after / before when both are numbers and before is not 0, "
        "unitless; for times, < 1 means faster.",
    )


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def change(field: str, before: Any, after: Any) -> Change:
    if not (is_number(before) and is_number(after)):
        return Change(field=field, before=before, after=after)
    ratio = _tidy(after / before) if before else None
    return Change(field=field, before=before, after=after, delta=_tidy(after - before), ratio=ratio)


def flatten(
    value: Any, prefix: str = "", *, skip: tuple[str, ...] = (), keep_empty: bool = True
) -> dict[str, Any]:
    """{'a': {'b': [1, 2]}} -> {'a.b.0': 1, 'a.b.1': 2}. Paths in `skip` (and below them) are
    left out; `keep_empty` keeps empty containers visible as leaves."""
    if prefix and _skipped(prefix, skip):
        return {}
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in items:
        flat.update(
            flatten(
                item, f"{prefix}.{key}" if prefix else str(key), skip=skip, keep_empty=keep_empty
            )
        )
    if not value and prefix and keep_empty:  # an empty container is a value too
        flat[prefix] = value
    return flat


def diff(
    before: dict,
    after: dict,
    *,
    skip: tuple[str, ...] = (),
    absent_as_zero: tuple[str, ...] = (),
    keep_empty: bool = True,
) -> list[Change]:
    """Every leaf that differs, in the order `after` lists its fields (then fields only
    `before` has). Under a prefix in `absent_as_zero` (counts), a missing leaf counts as 0."""
    fb = flatten(before or {}, skip=skip, keep_empty=keep_empty)
    fa = flatten(after or {}, skip=skip, keep_empty=keep_empty)
    changes = []
    for field in dict.fromkeys([*fa, *fb]):
        missing = 0 if absent_as_zero and field.startswith(absent_as_zero) else None
        b, a = fb.get(field, missing), fa.get(field, missing)
        if b != a:
            changes.append(change(field, b, a))
    return changes


def _skipped(path: str, skip: tuple[str, ...]) -> bool:
    return any(path == s or path.startswith(s + ".") for s in skip)


def _tidy(x: float) -> float:
    """12 significant digits: drops float noise (16.670000000000002) and keeps the signal."""
    return x if isinstance(x, int) else float(f"{x:.12g}")
