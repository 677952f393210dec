"""The `expect` language, parsed and evaluated: Python's expression syntax restricted to a
whitelist of node types (comparisons, arithmetic, and/or/not, field names, `baseline.<field>`,
calls of named functions), walked by plain code. Nothing is ever passed to `eval`.

Numbers are intervals: an exact number is [v, v]; a measured one may carry [low, high]
(e.g. a ratio's 95% CI). Arithmetic widens intervals (worst case), and a comparison is
True or False only when it holds or fails over the whole interval, else None
(inconclusive). A field without a value (null) makes a comparison inconclusive too.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from ...kernels.coderef import parse_python
from .errors import AgentError

MAX_CONDITION_CHARS = 500
# Nesting of one condition's syntax tree (an operator inside an operator ...): the walkers
# below recurse once per level, so a deep tree (400 unary minuses fit in 500 chars) would
# exhaust Python's stack. Real conditions nest a handful of levels.
MAX_CONDITION_DEPTH = 20
CONSTANT_NAMES = {"true": True, "false": False, "True": True, "False": False}
BUILTIN_FUNCTIONS = ("abs", "min", "max", "len")

_COMPARATORS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd)
_ALLOWED = (
    (
        ast.Expression,
        ast.Compare,
        ast.BoolOp,
        ast.UnaryOp,
        ast.BinOp,
        ast.Constant,
        ast.Name,
        ast.Load,
        ast.Attribute,
        ast.Call,
        ast.List,
        ast.Tuple,
    )
    + _COMPARATORS
    + _OPERATORS
)
GRAMMAR = (
    "comparisons (== != < <= > >=, chained as in 0.9 <= x <= 1.1), + - * / and parentheses, numbers, "
    "quoted strings, true/false, field names, baseline.<field>, lists with in / not in, and / or / not, "
    "and calls of abs, min, max, len or the tool's own functions"
)


class ExpectError(AgentError, ValueError):
    """A condition that cannot be judged as written; the message says how to fix it.
    A ValueError too, so pydantic validators report it as a validation error."""


@dataclass(frozen=True)
class Measured:
    """A number with an uncertainty interval [low, high] (e.g. a 95% confidence interval)."""

    value: float
    low: float
    high: float

    @staticmethod
    def exact(value: float) -> Measured:
        return Measured(float(value), float(value), float(value))

    @property
    def is_exact(self) -> bool:
        return self.low == self.high

    @property
    def is_finite(self) -> bool:
        return all(math.isfinite(v) for v in (self.value, self.low, self.high))


@dataclass(frozen=True)
class Missing:
    """A value the result does not have (a null field); every comparison with it is inconclusive."""

    what: str


def parse(condition: str) -> ast.Expression:
    """The condition's syntax tree, or an ExpectError naming what is not allowed."""
    if len(condition) > MAX_CONDITION_CHARS:
        raise ExpectError(
            f"condition {condition[:40]!r}... is {len(condition)} characters; keep each under "
            f"{MAX_CONDITION_CHARS} and pass several conditions instead"
        )
    try:
        tree = parse_python(condition.strip(), mode="eval")
    except SyntaxError as e:
        where = f" at column {e.offset}" if e.offset else ""
        if re.search(r"(?<![=!<>])=(?!=)", condition):
            where += ", '=' assigns; compare with '=='"
        raise ExpectError(
            f"condition {condition!r} is malformed{where} ({e.msg}); write e.g. "
            "'median_ms <= 0.95 * baseline.median_ms' using " + GRAMMAR
        ) from None
    depth = _depth(tree)
    if depth > MAX_CONDITION_DEPTH:
        raise ExpectError(
            f"condition {condition[:40]!r} nests {depth} levels deep (operators inside operators); "
            f"the limit is {MAX_CONDITION_DEPTH}: write it flatter, or split it into several "
            "conditions"
        )
    for node in ast.walk(tree):
        _check_node(condition, node)
    return tree


def _depth(tree: ast.AST) -> int:
    """How deep the tree nests (iteratively: measuring must not recurse either)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack += [(child, level + 1) for child in ast.iter_child_nodes(node)]
    return deepest


def _check_node(condition: str, node: ast.AST) -> None:
    bad = None
    if not isinstance(node, _ALLOWED):
        bad = f"{type(node).__name__} ({ast.unparse(node) if isinstance(node, ast.expr) else ''})"
    elif isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)):
        bad = f"the constant {node.value!r}"
    elif isinstance(node, ast.Attribute) and not (
        isinstance(node.value, ast.Name) and node.value.id == "baseline"
    ):
        bad = f"the attribute {ast.unparse(node)} (only baseline.<field> names another result)"
    elif isinstance(node, ast.Call) and (
        node.keywords
        or not isinstance(node.func, ast.Name)
        or any(isinstance(a, ast.Starred) for a in node.args)
    ):
        bad = f"the call {ast.unparse(node)} (call a function by name with positional arguments)"
    if bad:
        raise ExpectError(
            f"condition {condition!r} uses {bad}, which the expect language does not have; it has "
            + GRAMMAR
        )


def names_in(tree: ast.Expression) -> tuple[set[str], set[str], set[str]]:
    """(field names, baseline field names, function names) a condition refers to."""
    fields, baseline, functions = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            baseline.add(node.attr)
        elif isinstance(node, ast.Call):
            functions.add(node.func.id)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    owners = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and id(node) not in called | owners
            and node.id not in CONSTANT_NAMES
        ):
            fields.add(node.id)
    return fields, baseline, functions


@dataclass
class Comparison:
    """One comparison as judged: both sides' values and the three-valued answer."""

    text: str
    left: Any
    right: Any
    truth: bool | None
    reason: str


class Evaluator:
    """Evaluates one parsed condition in one scope; records every comparison it makes."""

    def __init__(
        self,
        lookup: Callable[[str], Any],
        baseline_lookup: Callable[[str], Any],
        functions: dict[str, Callable[..., Any]],
    ):
        self.lookup, self.baseline_lookup, self.functions = lookup, baseline_lookup, functions
        self.comparisons: list[Comparison] = []

    def truth(self, node: ast.AST) -> bool | None:
        """True, False, or None (inconclusive) for a node in a yes/no position."""
        if isinstance(node, ast.Expression):
            return self.truth(node.body)
        if isinstance(node, ast.BoolOp):
            parts = [
                self.truth(v) for v in node.values
            ]  # no short cut: every comparison is reported
            decisive = isinstance(node.op, ast.Or)
            return decisive if decisive in parts else (None if None in parts else not decisive)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.truth(node.operand)
            return None if inner is None else not inner
        if isinstance(node, ast.Compare):
            return self._compare_chain(node)
        value = self.value(node)
        if isinstance(value, Missing):
            self.comparisons.append(
                Comparison(ast.unparse(node), None, None, None, f"{value.what} has no value")
            )
            return None
        if not isinstance(value, bool):
            raise ExpectError(
                f"{ast.unparse(node)!r} is {_show(value)}, not a yes/no test; compare it, e.g. "
                f"'{ast.unparse(node)} <= 1'"
            )
        return value

    def _compare_chain(self, node: ast.Compare) -> bool | None:
        operands = [node.left, *node.comparators]
        parts = []
        for left, op, right in zip(operands, node.ops, operands[1:], strict=False):
            text = f"{ast.unparse(left)} {_OP_TEXT[type(op)]} {ast.unparse(right)}"
            a, b = self.value(left), self.value(right)
            truth, reason = compare(op, a, b, text)
            self.comparisons.append(Comparison(text, a, b, truth, reason))
            parts.append(truth)
        return False if False in parts else (None if None in parts else True)

    def value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return (
                Measured.exact(node.value) if isinstance(node.value, (int, float)) else node.value
            )
        if isinstance(node, ast.Name):
            return (
                CONSTANT_NAMES[node.id]
                if node.id in CONSTANT_NAMES
                else _number(self.lookup(node.id))
            )
        if isinstance(node, ast.Attribute):
            return _number(self.baseline_lookup(node.attr))
        if isinstance(node, (ast.List, ast.Tuple)):
            return [plain(self.value(e)) for e in node.elts]
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                raise ExpectError(f"'not' applies to tests, not to {ast.unparse(node.operand)!r}")
            inner = self.value(node.operand)
            return (
                inner
                if isinstance(node.op, ast.UAdd)
                else arithmetic(ast.Mult(), Measured.exact(-1), inner)
            )
        if isinstance(node, ast.BinOp):
            return arithmetic(
                node.op, self.value(node.left), self.value(node.right), ast.unparse(node)
            )
        if isinstance(node, ast.Call):
            return self._call(node)
        raise ExpectError(
            f"{ast.unparse(node)!r} is a test where a value is needed"
        )  # e.g. (a < b) + 1

    def _call(self, node: ast.Call) -> Any:
        name, args = node.func.id, [self.value(a) for a in node.args]
        missing = next((a for a in args if isinstance(a, Missing)), None)
        if missing is not None:
            return missing
        if name in BUILTIN_FUNCTIONS:
            return _builtin(name, args, ast.unparse(node))
        if name not in self.functions:
            raise ExpectError(
                f"unknown function {name!r}; this tool has: "
                + ", ".join([*BUILTIN_FUNCTIONS, *self.functions])
            )
        result = self.functions[name](*[a.value if isinstance(a, Measured) else a for a in args])
        return Missing(ast.unparse(node)) if result is None else _number(result)


_OP_TEXT = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
}


def compare(op: ast.cmpop, a: Any, b: Any, text: str) -> tuple[bool | None, str]:
    """Three-valued comparison with the reason when it cannot decide."""
    missing = next((v for v in (a, b) if isinstance(v, Missing)), None)
    if missing is not None:
        return None, f"{missing.what} has no value (null) in this result"
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(b, (list, tuple, str)):
            raise ExpectError(
                f"in {text!r} the right side is {_show(b)}; 'in' needs a list or a string"
            )
        found = plain(a) in b
        return (found if isinstance(op, ast.In) else not found), ""
    if isinstance(a, Measured) and isinstance(b, Measured):
        overflowed = [side for side, v in (("left", a), ("right", b)) if not v.is_finite]
        if overflowed:  # inf - inf is NaN, and no answer holds over an infinite interval
            return None, (
                f"the {' and '.join(overflowed)} side is not a finite number (it overflowed to "
                "infinity or NaN, or divides by an interval that holds 0); compare numbers within "
                "about 1e308"
            )
        return _compare_intervals(op, a, b)
    if type(a) is not type(b) or (
        isinstance(a, (str, bool, list)) and not isinstance(op, (ast.Eq, ast.NotEq))
    ):
        raise ExpectError(
            f"{text!r} compares {_show(a)} with {_show(b)}; compare numbers with numbers, "
            "strings and true/false only with == or !="
        )
    return (a == b) == isinstance(op, ast.Eq), ""


def _compare_intervals(op: ast.cmpop, a: Measured, b: Measured) -> tuple[bool | None, str]:
    if math.isnan(a.value) or math.isnan(b.value):
        return None, "a side is NaN"
    if isinstance(op, (ast.Eq, ast.NotEq)):
        if a.is_exact and b.is_exact:
            return (a.value == b.value) == isinstance(op, ast.Eq), ""
        if a.high < b.low or b.high < a.low:
            return not isinstance(op, ast.Eq), ""
        return None, "the intervals overlap, so equality cannot be decided"
    if isinstance(op, (ast.Gt, ast.GtE)):  # a > b is b < a
        a, b, op = b, a, (ast.Lt() if isinstance(op, ast.Gt) else ast.LtE())
    strict = isinstance(op, ast.Lt)
    holds = a.high < b.low if strict else a.high <= b.low
    fails = a.low >= b.high if strict else a.low > b.high
    if holds or fails:
        return holds, ""
    return None, (
        f"[{a.low:.6g}, {a.high:.6g}] and [{b.low:.6g}, {b.high:.6g}] overlap: the uncertainty "
        "interval straddles the threshold"
    )


def arithmetic(op: ast.operator, a: Any, b: Any, text: str = "") -> Any:
    """Interval arithmetic (worst case over both intervals); Missing propagates."""
    if isinstance(op, ast.Div) and isinstance(b, Measured) and b.is_exact and b.value == 0:
        raise ExpectError(
            f"{text!r} divides by zero"
        )  # whatever the left side holds: said before a run
    for v in (a, b):
        if isinstance(v, Missing):
            return v
    if not (isinstance(a, Measured) and isinstance(b, Measured)):
        raise ExpectError(
            f"{text!r} does arithmetic on {_show(a)} and {_show(b)}; only numbers add and multiply"
        )
    if isinstance(op, ast.Add):
        return Measured(a.value + b.value, a.low + b.low, a.high + b.high)
    if isinstance(op, ast.Sub):
        return Measured(a.value - b.value, a.low - b.high, a.high - b.low)
    if isinstance(op, ast.Div):
        if b.low <= 0 <= b.high:
            return Measured(a.value / b.value if b.value else math.nan, -math.inf, math.inf)
        b = Measured(1 / b.value, 1 / b.high, 1 / b.low)
    products = [x * y for x in (a.low, a.high) for y in (b.low, b.high)]
    return Measured(a.value * b.value, min(products), max(products))


def _builtin(name: str, args: list[Any], text: str) -> Any:
    if name == "len":
        if len(args) != 1 or not isinstance(args[0], (list, str)):
            raise ExpectError(f"{text!r}: len takes one list or string")
        return Measured.exact(len(args[0]))
    if not args or not all(isinstance(a, Measured) for a in args):
        raise ExpectError(f"{text!r}: {name} takes numbers")
    if name == "abs":
        (a,) = args
        if a.low >= 0:
            return a
        if a.high <= 0:
            return Measured(-a.value, -a.high, -a.low)
        return Measured(abs(a.value), 0.0, max(-a.low, a.high))
    pick = min if name == "min" else max
    return Measured(
        pick(a.value for a in args), pick(a.low for a in args), pick(a.high for a in args)
    )


def _number(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Measured.exact(value)
    return value


def plain(value: Any) -> Any:
    """A value as reported (JSON): a Measured becomes its central number; a number that is not
    finite becomes None (JSON has no infinity or NaN; the comparison's reason says why)."""
    if isinstance(value, Measured):
        value = value.value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return None if isinstance(value, Missing) else value


def _show(value: Any) -> str:
    if isinstance(value, Measured):
        return f"the number {value.value:.6g}"
    return f"the {type(value).__name__} {value!r}"


__all__ = [
    "ExpectError",
    "Measured",
    "Missing",
    "Evaluator",
    "parse",
    "names_in",
    "compare",
    "arithmetic",
]
