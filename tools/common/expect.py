"""One answer to the hypothesis, for every tool: `expect` conditions over the tool's own output.

A tool declares which fields a condition may name (a `Catalogue`: whole-call fields,
per-scope fields such as one value per shape or per case, and named functions), checks
the conditions before it runs anything (`check`, so a typo costs nothing), and after its
judge has the numbers hands them over as `Facts` to `judge`, which returns the
`HypothesisAnswer` every output carries.

A condition that names a per-scope field is a claim about every scope (every shape,
every case): it is contradicted if any scope contradicts it, inconclusive if any scope
cannot decide, supported otherwise. The conditions of one call all have to hold.

A tool gives a field an uncertainty interval by handing a `Measured(value, low, high)`;
a comparison whose interval straddles the threshold is inconclusive.

This is the one module tools and the server import for `expect`. Each tool with fields of its
own declares them in tools/<tool>/expect_fields.py as an `ExpectFields`: its catalogue and
`facts(inp, out, evidence)`, where evidence is what the judge knew beyond the output (handed
back by run() as `WithEvidence`); a tool without one gets its output's plain top-level fields
(`plain_fields`). The language itself (syntax, interval arithmetic, three-valued comparison)
is tools/common/expect_eval.py, which nothing else imports.
"""

from __future__ import annotations

import difflib
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, Field

from ...kernels.workspace import excerpt
from .expect_eval import (
    BUILTIN_FUNCTIONS,
    GRAMMAR,
    Evaluator,
    ExpectError,
    Measured,
    Missing,
    names_in,
    parse,
    plain,
)

__all__ = [
    "Catalogue",
    "Facts",
    "ExpectFields",
    "WithEvidence",
    "HypothesisAnswer",
    "ConditionResult",
    "ComparisonResult",
    "ExpectError",
    "Measured",
    "LANGUAGE",
    "check",
    "judge",
    "answer",
    "parse",
    "plain_fields",
    "summary_line",
]

Answer = Literal["supported", "contradicted", "inconclusive"]

LANGUAGE = (
    "Conditions over this tool's own output fields that the hypothesis predicts, all of which must hold, "
    "e.g. ['median_ms <= 0.95 * baseline.median_ms'], ['spill_stores_bytes == 0', "
    "'registers_per_thread <= 128'], ['\"partition_mismatch\" in finding_codes']. The language has "
    + GRAMMAR
    + ". baseline.<field> is the same field of the baseline's result. A condition on a "
    "per-shape or per-case field must hold for every one. The answer (hypothesis_answer) is supported, "
    "contradicted, or inconclusive when an uncertainty interval straddles the threshold or a field has "
    "no value; the tool's description lists the fields it offers."
)


class ComparisonResult(BaseModel):
    comparison: str = Field(
        description="The comparison as judged, e.g. 'median_ms <= 0.95 * baseline.median_ms'."
    )
    scope: str = Field(
        description="Which shape or case this is about; empty for a whole-call field."
    )
    left: float | str | bool | list | None = Field(
        description="Left side's value (a number in the field's "
        "own unit; null when the field has no value)."
    )
    right: float | str | bool | list | None = Field(description="Right side's value.")
    left_interval: list[float] | None = Field(
        default=None,
        description="[low, high] of the left side when it "
        "carries uncertainty (e.g. from a 95% CI); null when exact.",
    )
    right_interval: list[float] | None = Field(
        default=None, description="[low, high] of the right side, or null."
    )
    answer: Answer = Field(
        description="Whether this comparison holds (supported), fails (contradicted), or "
        "cannot be decided from the evidence (inconclusive)."
    )
    reason: str = Field(
        default="",
        description="Why it is inconclusive (e.g. the interval straddles the "
        "threshold); empty when decided.",
    )


class ConditionResult(BaseModel):
    condition: str = Field(description="The condition as given in expect.")
    answer: Answer = Field(
        description="supported when it holds everywhere, contradicted when it fails "
        "anywhere, else inconclusive."
    )
    comparisons: list[ComparisonResult] = Field(
        description="Every comparison made, per scope, with its numbers."
    )


class HypothesisAnswer(BaseModel):
    answer: Literal["supported", "contradicted", "inconclusive", "not_judged"] = Field(
        default="not_judged",
        description="Over all expect conditions: contradicted if any is, else "
        "inconclusive if any is, else supported; not_judged when the call gave no expect.",
    )
    conditions: list[ConditionResult] = Field(
        default_factory=list, description="One per expect condition."
    )


@dataclass(frozen=True)
class Catalogue:
    """What a tool's conditions may name, with descriptions (they go into error messages)."""

    fields: dict[str, str]  # whole-call field -> description with unit
    scoped: dict[str, str] = field(
        default_factory=dict
    )  # field with one value per scope -> description
    scope_kind: str = "case"  # what a scope is, for messages: "shape", "case"
    functions: dict[str, str] = field(default_factory=dict)  # 'name(args)' -> description

    @property
    def function_names(self) -> set[str]:
        return {signature.split("(")[0] for signature in self.functions} | set(BUILTIN_FUNCTIONS)

    def names(self, max_chars: int | None = None) -> str:
        """The names alone, grouped (whole call; per scope; functions), for a tool's description and
        errors. With max_chars, whole names up to that length and how many more: never a cut name."""
        groups = [
            ("", list(self.fields)),
            (f"per {self.scope_kind}: ", list(self.scoped)),
            ("functions: ", list(self.functions)),
        ]
        text = "; ".join(head + ", ".join(names) for head, names in groups if names)
        if max_chars is None or len(text) <= max_chars:
            return text
        shown, left = [], sum(len(names) for _, names in groups)
        for head, names in groups:
            kept = []
            for name in names:
                if len("; ".join(shown + [head + ", ".join(kept + [name])])) > max_chars:
                    break
                kept.append(name)
            if kept:
                shown.append(head + ", ".join(kept))
                left -= len(kept)
            if len(kept) < len(names):
                break
        return "; ".join(shown) + f"; and {left} more"

    def described(self) -> str:
        """Every name with its meaning and unit, one per line, grouped: the text of the resource
        expect://{tool} and of `infra-agent tools TOOL`."""
        groups = [
            ("whole call", self.fields),
            (f"per {self.scope_kind} (must hold in every one)", self.scoped),
            ("functions", self.functions),
        ]
        lines = []
        for title, entries in groups:
            if entries:
                lines += [f"{title}:"] + [
                    f"  {name}: {meaning}" for name, meaning in entries.items()
                ]
        return "\n".join(lines)

    def listing(self) -> str:
        """The names with their descriptions, on one line (serve_benchmark's description)."""
        parts = [f"{n} ({d})" for n, d in self.fields.items()]
        parts += [f"{n} (per {self.scope_kind}: {d})" for n, d in self.scoped.items()]
        parts += [f"{s} ({d})" for s, d in self.functions.items()]
        return "; ".join(parts)

    def suggestion(self, name: str) -> str:
        """' (did you mean X?)' for a near miss of a field name, else ''."""
        close = difflib.get_close_matches(name, [*self.fields, *self.scoped], n=1, cutoff=0.75)
        return f" (did you mean {close[0]}?)" if close else ""


@dataclass
class Facts:
    """One result's values for the catalogue's names. A value is a number, a `Measured`, a string,
    a bool, a list, or None (no value: comparisons with it are inconclusive)."""

    fields: dict[str, Any] = field(default_factory=dict)
    scopes: dict[str, dict[str, Any]] = field(default_factory=dict)  # scope label -> scoped fields
    functions: dict[str, Callable[..., Any]] = field(default_factory=dict)
    baseline: Facts | None = None


Evidence = TypeVar("Evidence")


@dataclass(frozen=True)
class ExpectFields(Generic[Evidence]):
    """A tool's `expect`: what its conditions may name, and how to read those values off one call.
    `facts(inp, out, evidence)` gets everything it reads as arguments: evidence is what the tool's
    judge knew beyond its output (None for a tool whose output says it all)."""

    catalogue: Catalogue
    facts: Callable[[Any, Any, Evidence], Facts]


class WithEvidence(NamedTuple):
    """What a tool's run() returns when its expect facts read more than the output (profile's judged
    events, for any overlap_fraction pair; compile_kernel's baseline kernel): the harness judges
    `expect` after the run, so the evidence travels with the output instead of inside it."""

    output: Any  # the tool's Output
    evidence: Any


# Bookkeeping every output has; not evidence about the hypothesis.
NOT_EVIDENCE = ("experiment_id", "summary", "artifacts", "hypothesis_answer")


@functools.cache
def plain_fields(output_model: type[BaseModel]) -> ExpectFields[None]:
    """The expect of a tool without an expect_fields.py: its output's top-level fields that are
    numbers, strings, true/false or lists, with their descriptions, read straight off the output."""
    catalogue = Catalogue(
        fields={
            name: (info.description or "")
            for name, info in output_model.model_fields.items()
            if name not in NOT_EVIDENCE and _is_plain(info.annotation)
        }
    )

    def facts(inp: Any, out: BaseModel, evidence: None) -> Facts:
        return Facts(fields=out.model_dump(mode="json", include=set(catalogue.fields)))

    return ExpectFields(catalogue, facts)


def _is_plain(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return all(_is_plain(a) for a in typing.get_args(annotation) if a is not type(None))
    if origin is Literal:
        return True
    if origin is list:
        return True  # compared with in / not in, or counted with len()
    return annotation in (int, float, str, bool)


MAX_LISTED_NAMES_CHARS = 2_500  # of an error naming what a tool offers (errors are cut at 4,000)


def check(
    conditions: list[str] | None,
    catalogue: Catalogue,
    *,
    has_baseline: bool,
    described_at: str = "the tool's description",
) -> None:
    """Raise ExpectError for a malformed condition or a name the tool does not offer (before any work).
    `described_at` says where every name's meaning and unit can be read (e.g. a resource)."""
    known = set(catalogue.fields) | set(catalogue.scoped)
    for condition in conditions or []:
        fields, baseline_fields, functions = names_in(parse(condition))
        unknown = sorted((fields | baseline_fields) - known)
        if unknown:
            hint = "".join(catalogue.suggestion(n) for n in unknown[:1])
            raise ExpectError(
                f"condition {excerpt(condition)} names {', '.join(unknown)}, which this tool does "
                f"not report{hint}; it offers {catalogue.names(MAX_LISTED_NAMES_CHARS)} (each "
                f"with its meaning and unit: {described_at})"
            )
        unknown_calls = sorted(functions - catalogue.function_names)
        if unknown_calls:
            raise ExpectError(
                f"condition {excerpt(condition)} calls {', '.join(unknown_calls)}, which this tool "
                f"does not have; it has: {', '.join(sorted(catalogue.function_names))}"
            )
        if baseline_fields and not has_baseline:
            raise ExpectError(
                f"condition {excerpt(condition)} names baseline.{sorted(baseline_fields)[0]} but "
                "this call has no baseline; pass baseline= or drop the baseline. part"
            )
        _dry_run(parse(condition), catalogue)


def _dry_run(tree, catalogue: Catalogue) -> None:
    """Evaluate a condition with every field unknown: what fails whatever the result holds (a
    division by zero between numbers, a number used as a test) fails now, before the call runs
    anything (an engine it starts, a benchmark of minutes)."""
    functions = {
        name: (lambda *_: None) for name in catalogue.function_names - set(BUILTIN_FUNCTIONS)
    }
    Evaluator(
        lambda name: Missing(name), lambda name: Missing("baseline." + name), functions
    ).truth(tree)


def judge(conditions: list[str] | None, facts: Facts, catalogue: Catalogue) -> HypothesisAnswer:
    """Each condition judged over the facts; the overall answer is their three-valued conjunction."""
    if not conditions:
        return HypothesisAnswer()
    check(conditions, catalogue, has_baseline=facts.baseline is not None)
    results = [_judge_condition(c, facts, catalogue) for c in conditions]
    return HypothesisAnswer(answer=_conjunction([r.answer for r in results]), conditions=results)


def answer(
    conditions: list[str] | None, fields: ExpectFields, inp: Any, out: Any, evidence: Any = None
) -> HypothesisAnswer:
    """One call's conditions judged over the facts its tool reads off the output and evidence."""
    if not conditions:
        return HypothesisAnswer()
    return judge(conditions, fields.facts(inp, out, evidence), fields.catalogue)


def summary_line(answer: HypothesisAnswer) -> str:
    """The answer in one sentence for the summary, naming the first condition that decided it."""
    total = len(answer.conditions)
    if answer.answer == "supported":
        return f"Expect: supported ({total} of {total} conditions hold)."
    deciding = next(c for c in answer.conditions if c.answer == answer.answer)
    cmp = next(
        (c for c in deciding.comparisons if c.answer == answer.answer), deciding.comparisons[0]
    )
    where = f" at {cmp.scope}" if cmp.scope else ""
    numbers = f"{_shown(cmp.left)} vs {_shown(cmp.right)}{where}"
    if answer.answer == "contradicted":
        return f"Expect: contradicted, {deciding.condition!r} fails ({numbers})."
    return (
        f"Expect: inconclusive, {deciding.condition!r} cannot be decided ({numbers}: {cmp.reason})."
    )


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _judge_condition(condition: str, facts: Facts, catalogue: Catalogue) -> ConditionResult:
    tree = parse(condition)
    fields, baseline_fields, _ = names_in(tree)
    if not (fields | baseline_fields) & set(catalogue.scoped):
        scopes = {"": {}}
    elif facts.scopes:
        scopes = facts.scopes
    else:  # nothing ran that the condition could be about
        return ConditionResult(
            condition=condition,
            answer="inconclusive",
            comparisons=[
                ComparisonResult(
                    comparison=condition,
                    scope="",
                    left=None,
                    right=None,
                    answer="inconclusive",
                    reason=f"no {catalogue.scope_kind} produced a result",
                )
            ],
        )
    comparisons, answers = [], []
    for label in scopes:
        evaluator = Evaluator(
            _lookup(facts, label, ""),
            _lookup(facts.baseline or Facts(), label, "baseline."),
            facts.functions,
        )
        answers.append(_answer(evaluator.truth(tree)))
        comparisons += [_comparison_result(c, label) for c in evaluator.comparisons]
    return ConditionResult(
        condition=condition, answer=_conjunction(answers), comparisons=comparisons
    )


def _lookup(facts: Facts, label: str, prefix: str) -> Callable[[str], Any]:
    scoped = facts.scopes.get(label, {})

    def lookup(name: str) -> Any:
        if name in scoped:
            value = scoped[name]
        elif name in facts.fields:
            value = facts.fields[name]
        else:
            value = None
        return Missing(prefix + name) if value is None else value

    return lookup


def _comparison_result(c, scope: str) -> ComparisonResult:
    return ComparisonResult(
        comparison=c.text,
        scope=scope,
        left=plain(c.left),
        right=plain(c.right),
        left_interval=_interval(c.left),
        right_interval=_interval(c.right),
        answer=_answer(c.truth),
        reason=c.reason,
    )


def _interval(value: Any) -> list[float] | None:
    if not isinstance(value, Measured) or value.is_exact or not value.is_finite:
        return None  # exact, or not a finite interval (JSON has no infinity; the reason says so)
    return [value.low, value.high]


def _answer(truth: bool | None) -> Answer:
    if truth is None:
        return "inconclusive"
    return "supported" if truth else "contradicted"


def _conjunction(answers: list[Answer]) -> Answer:
    if "contradicted" in answers:
        return "contradicted"
    return "inconclusive" if "inconclusive" in answers else "supported"
