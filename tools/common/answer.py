"""The expect fields every tool has without writing any: its output's own plain top-level fields.

A tool with per-shape or per-case numbers, uncertainty intervals or a baseline declares its own
`Catalogue` and facts (tools/<tool>/expect_fields.py); the rest get these, read off the output model.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel

from .expect import Catalogue, Facts, HypothesisAnswer

# Bookkeeping every output has; not evidence about the hypothesis.
NOT_EVIDENCE = ("experiment_id", "summary", "artifacts", "hypothesis_answer")


@functools.cache
def catalogue_of(output_model: type[BaseModel]) -> Catalogue:
    """The output's top-level fields that are numbers, strings, true/false or lists, with their descriptions."""
    fields = {name: (info.description or "") for name, info in output_model.model_fields.items()
              if name not in NOT_EVIDENCE and _is_plain(info.annotation)}
    return Catalogue(fields=fields)


def facts_of(out: BaseModel) -> Facts:
    data = out.model_dump(mode="json", include=set(catalogue_of(type(out)).fields))
    return Facts(fields=data)


def summary_line(answer: HypothesisAnswer) -> str:
    """The answer in one sentence for the summary, naming the first condition that decided it."""
    total = len(answer.conditions)
    if answer.answer == "supported":
        return f"Expect: supported ({total} of {total} conditions hold)."
    deciding = next(c for c in answer.conditions if c.answer == answer.answer)
    cmp = next((c for c in deciding.comparisons if c.answer == answer.answer), deciding.comparisons[0])
    where = f" at {cmp.scope}" if cmp.scope else ""
    numbers = f"{_show(cmp.left)} vs {_show(cmp.right)}{where}"
    if answer.answer == "contradicted":
        return f"Expect: contradicted, {deciding.condition!r} fails ({numbers})."
    return f"Expect: inconclusive, {deciding.condition!r} cannot be decided ({numbers}: {cmp.reason})."


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _is_plain(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return all(_is_plain(a) for a in typing.get_args(annotation) if a is not type(None))
    if origin is Literal:
        return True
    if origin is list:
        return True  # compared with in / not in, or counted with len()
    return annotation in (int, float, str, bool)
