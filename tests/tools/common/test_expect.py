"""The expect language: parsing, three-valued judging with intervals, scopes, baselines, errors."""

import math

import pytest

from infra_agent.tools.base import AgentError
from infra_agent.tools.common.expect import (
    Catalogue,
    ExpectError,
    Facts,
    HypothesisAnswer,
    Measured,
    check,
    judge,
)

CATALOGUE = Catalogue(
    fields={
        "verdict": "overall verdict",
        "finding_codes": "finding codes",
        "num_cases": "cases run",
        "is_locked": "kernel is locked",
        "spill_stores_bytes": "spilled bytes",
    },
    scoped={"median_ms": "median, ms", "ratio": "candidate/baseline", "rel_l2_error": "rel L2"},
    scope_kind="shape",
    functions={"overlap_fraction(a, b)": "fraction of a's time overlapping b"},
)


def facts(**scopes) -> Facts:
    return Facts(
        fields={
            "verdict": "pass",
            "finding_codes": ["partition_mismatch", "caching"],
            "num_cases": 2,
            "is_locked": False,
            "spill_stores_bytes": 0,
        },
        scopes=scopes or {"M=1": {"median_ms": 1.0, "ratio": 0.9, "rel_l2_error": 1e-7}},
    )


def answer_of(condition: str, f: Facts | None = None) -> str:
    return judge([condition], f or facts(), CATALOGUE).answer


@pytest.mark.parametrize(
    "condition, expected",
    [
        ("spill_stores_bytes == 0", "supported"),
        ("spill_stores_bytes != 0", "contradicted"),
        ("num_cases >= 2", "supported"),
        ("num_cases > 2", "contradicted"),
        ("num_cases < 3 and num_cases <= 2", "supported"),
        ("verdict == 'pass'", "supported"),
        ('verdict == "fail"', "contradicted"),
        ("verdict in ['pass', 'inconclusive']", "supported"),
        ('"partition_mismatch" in finding_codes', "supported"),
        ('"mutation" not in finding_codes', "supported"),
        ("len(finding_codes) == 0", "contradicted"),
        ("is_locked == false", "supported"),
        ("not is_locked", "supported"),
        ("is_locked or verdict == 'pass'", "supported"),
        ("is_locked and verdict == 'pass'", "contradicted"),
        ("0.5 <= ratio <= 1", "supported"),
        ("0.95 <= ratio <= 1", "contradicted"),
        ("median_ms * 2 - 1 == 1", "supported"),
        ("-median_ms < 0", "supported"),
        ("abs(ratio - 1) < 0.2 and max(ratio, 0.5) == 0.9 and min(ratio, 0.5) == 0.5", "supported"),
        ("rel_l2_error <= 1e-6", "supported"),
        ("overlap_fraction('kv_transfer', 'dispatch') >= 0.5", "supported"),
    ],
)
def test_exact_values_decide(condition, expected):
    f = facts()
    f.functions["overlap_fraction"] = lambda a, b: (
        0.75 if (a, b) == ("kv_transfer", "dispatch") else 0.0
    )
    assert answer_of(condition, f) == expected


@pytest.mark.parametrize(
    "interval, expected",
    [
        ((0.85, 0.93), "supported"),  # wholly under the threshold
        ((0.90, 1.02), "inconclusive"),  # straddles 0.95
        ((0.97, 1.10), "contradicted"),  # wholly over it
    ],
)
def test_an_interval_that_straddles_the_threshold_is_inconclusive(interval, expected):
    f = facts(
        **{"M=1": {"median_ms": Measured(0.95, *interval), "ratio": None, "rel_l2_error": 0.0}}
    )
    f.baseline = Facts(scopes={"M=1": {"median_ms": 1.0}})
    result = judge(["median_ms <= 0.95 * baseline.median_ms"], f, CATALOGUE)
    assert result.answer == expected
    (cmp,) = result.conditions[0].comparisons
    assert (
        cmp.left == 0.95
        and cmp.left_interval == list(interval)
        and cmp.right == pytest.approx(0.95)
    )
    assert cmp.right_interval is None
    assert ("straddles" in cmp.reason) == (expected == "inconclusive")


def test_interval_arithmetic_widens_and_reports_both_sides():
    f = facts(**{"M=1": {"median_ms": Measured(1.0, 0.9, 1.1), "ratio": 1.0, "rel_l2_error": 0.0}})
    f.baseline = Facts(scopes={"M=1": {"median_ms": Measured(2.0, 1.9, 2.1)}})
    result = judge(["median_ms <= 0.5 * baseline.median_ms - 0.1"], f, CATALOGUE)
    cmp = result.conditions[0].comparisons[0]
    assert cmp.right == pytest.approx(0.9) and cmp.right_interval == pytest.approx([0.85, 0.95])
    assert result.answer == "inconclusive"
    assert answer_of("median_ms < 2 * 0.5 + 0.2", f) == "supported"
    assert answer_of("median_ms / ratio > 0", f) == "supported"


@pytest.mark.parametrize(
    "condition, expected",
    [
        ("median_ms == 1", "inconclusive"),
        ("median_ms != 1", "inconclusive"),
        ("median_ms == 2", "contradicted"),
        ("median_ms != 2", "supported"),
        ("median_ms > 0.9", "inconclusive"),
        ("median_ms >= 0.8", "supported"),
        ("median_ms < 0.8", "contradicted"),
    ],
)
def test_comparisons_of_intervals(condition, expected):
    f = facts(**{"M=1": {"median_ms": Measured(1.0, 0.85, 1.2), "ratio": 1.0, "rel_l2_error": 0.0}})
    assert answer_of(condition, f) == expected


def test_division_by_an_interval_around_zero_cannot_decide():
    f = facts(**{"M=1": {"median_ms": 1.0, "ratio": Measured(0.0, -0.1, 0.1), "rel_l2_error": 0.0}})
    assert answer_of("median_ms / ratio > 1", f) == "inconclusive"
    with pytest.raises(ExpectError, match="divides by zero"):
        judge(["median_ms / 0 > 1"], f, CATALOGUE)


def test_a_null_field_is_inconclusive_and_says_which():
    f = facts(**{"M=1": {"median_ms": 1.0, "ratio": None, "rel_l2_error": math.nan}})
    result = judge(["ratio < 1"], f, CATALOGUE)
    assert result.answer == "inconclusive"
    assert "ratio has no value" in result.conditions[0].comparisons[0].reason
    assert answer_of("rel_l2_error < 1", f) == "inconclusive"  # NaN decides nothing
    f.functions["overlap_fraction"] = lambda a, b: None
    assert answer_of("overlap_fraction('a', 'b') > 0.5", f) == "inconclusive"


def test_a_scoped_condition_must_hold_in_every_scope():
    one_bad = facts(
        **{"M=1": {"median_ms": 1.0}, "M=2": {"median_ms": 3.0}, "M=3": {"median_ms": None}}
    )
    result = judge(["median_ms < 2"], one_bad, CATALOGUE)
    assert result.answer == "contradicted"
    assert [(c.scope, c.answer) for c in result.conditions[0].comparisons] == [
        ("M=1", "supported"),
        ("M=2", "contradicted"),
        ("M=3", "inconclusive"),
    ]
    assert answer_of("median_ms < 4", one_bad) == "inconclusive"
    assert (
        answer_of("median_ms < 4", facts(**{"M=1": {"median_ms": 1.0}, "M=2": {"median_ms": 3.0}}))
        == "supported"
    )


def test_a_whole_call_condition_is_judged_once_and_scoped_fields_without_scopes_cannot_decide():
    result = judge(["verdict == 'pass'"], facts(**{"a": {}, "b": {}}), CATALOGUE)
    assert [c.scope for c in result.conditions[0].comparisons] == [""]
    empty = Facts(fields={"verdict": "pass"})
    result = judge(
        ["median_ms < 1"], empty, Catalogue(fields={"verdict": ""}, scoped={"median_ms": ""})
    )
    assert (
        result.answer == "inconclusive" and "no case" in result.conditions[0].comparisons[0].reason
    )


def test_baseline_fields_come_from_the_same_scope_then_the_whole_call():
    f = facts(**{"M=1": {"median_ms": 1.0}, "M=2": {"median_ms": 2.0}})
    f.baseline = Facts(
        fields={"spill_stores_bytes": 64},
        scopes={"M=1": {"median_ms": 1.5}, "M=2": {"median_ms": 1.9}},
    )
    result = judge(
        ["median_ms <= baseline.median_ms", "spill_stores_bytes < baseline.spill_stores_bytes"],
        f,
        CATALOGUE,
    )
    assert [c.answer for c in result.conditions] == ["contradicted", "supported"]
    assert [c.right for c in result.conditions[0].comparisons] == [1.5, 1.9]
    assert result.answer == "contradicted"


def test_conditions_combine_as_all_must_hold():
    f = facts()
    assert judge(["num_cases == 2", "verdict == 'pass'"], f, CATALOGUE).answer == "supported"
    assert judge(["num_cases == 2", "ratio < 0.5"], f, CATALOGUE).answer == "contradicted"
    f.scopes["M=1"]["ratio"] = Measured(0.9, 0.8, 1.1)
    assert judge(["num_cases == 2", "ratio < 1"], f, CATALOGUE).answer == "inconclusive"
    assert judge(["ratio < 1", "num_cases == 3"], f, CATALOGUE).answer == "contradicted"
    assert judge(["ratio < 1 or num_cases == 2"], f, CATALOGUE).answer == "supported"
    assert judge(["not ratio < 1"], f, CATALOGUE).answer == "inconclusive"


def test_no_expect_is_not_judged_and_the_answer_is_plain_json():
    assert judge(None, facts(), CATALOGUE) == HypothesisAnswer(answer="not_judged", conditions=[])
    assert judge([], facts(), CATALOGUE).answer == "not_judged"
    f = facts(**{"M=1": {"ratio": Measured(0.9, 0.8, 1.1)}})
    dumped = judge(["ratio < 1"], f, CATALOGUE).model_dump(mode="json")
    assert HypothesisAnswer.model_validate(dumped).conditions[0].comparisons[0].left_interval == [
        0.8,
        1.1,
    ]


@pytest.mark.parametrize(
    "condition, message",
    [
        ("median_ms <=", "malformed"),
        ("median_ms = 1", "compare with '=='"),
        ("median_ms <= 1)", "malformed"),
        ("__import__('os').system('true')", "does not have"),
        ("().__class__.__bases__", "does not have"),
        ("verdict.upper() == 'PASS'", "does not have"),
        ("[x for x in finding_codes]", "ListComp"),
        ("finding_codes[0] == 'x'", "Subscript"),
        ("lambda: 1", "Lambda"),
        ("median_ms ** 2 < 1", "Pow"),
        ("abs(x=1) < 1", "positional"),
        ("x.median_ms < 1", "only baseline"),
        ("None == verdict", "constant None"),
        ("x" * 600, "under 500"),
    ],
)
def test_malformed_conditions_say_what_the_language_has(condition, message):
    with pytest.raises(ExpectError, match=message) as err:
        check([condition], CATALOGUE, has_baseline=True)
    assert isinstance(err.value, AgentError) and isinstance(err.value, ValueError)


def test_unknown_names_list_what_one_can_name():
    with pytest.raises(ExpectError) as err:
        check(["median_time < 1"], CATALOGUE, has_baseline=False)
    text = str(err.value)
    assert (
        "median_time" in text
        and "(did you mean median_ms?)" in text
        and "per shape: median_ms" in text
    )
    assert "verdict" in text and "overlap_fraction(a, b)" in text
    described = CATALOGUE.described()  # every name with its meaning (the resource expect://{tool})
    assert "  median_ms: median, ms" in described and "  verdict: overall verdict" in described
    with pytest.raises(ExpectError, match="baseline.typo"):
        check(["median_ms < baseline.typo"], CATALOGUE, has_baseline=True)
    with pytest.raises(ExpectError, match="calls overlap, which"):
        check(["overlap('a', 'b') > 1"], CATALOGUE, has_baseline=False)
    with pytest.raises(ExpectError, match="no baseline; pass baseline="):
        check(["median_ms < baseline.median_ms"], CATALOGUE, has_baseline=False)
    check(
        ["median_ms < baseline.median_ms", "verdict == 'pass'"], CATALOGUE, has_baseline=True
    )  # fine


@pytest.mark.parametrize(
    "condition, message",
    [
        ("median_ms", "not a yes/no test"),
        ("verdict < 3", "compares the str"),
        ("verdict + 1 > 2", "only numbers"),
        ("'x' in num_cases", "needs a list"),
        ("len(num_cases) == 1", "len takes"),
        ("(median_ms < 1) + 1 > 1", "a test where a value is needed"),
        ("not median_ms + 1 > 1 and (not median_ms) + 1 > 1", "'not' applies to tests"),
    ],
)
def test_type_errors_at_judge_time_are_clear(condition, message):
    with pytest.raises(ExpectError, match=message):
        judge([condition], facts(), CATALOGUE)


def test_a_bounded_name_list_ends_on_a_whole_name_and_says_how_many_more():
    full = CATALOGUE.names()
    for limit in range(10, len(full)):
        short = CATALOGUE.names(limit)
        listed, _, more = short.rpartition("; and ")
        names = {
            n.strip()
            for part in listed.split("; ")
            for n in part.split(":")[-1].split(",")
            if n.strip()
        }
        assert names <= {*CATALOGUE.fields, *CATALOGUE.scoped, *CATALOGUE.functions}, (limit, short)
        assert len(names) + int(more.split()[0]) == 9 and len(listed) <= limit, (limit, short)
