"""The sweep's shared pieces (tools/common/sweep.py) that need no server: spaces, the front, CSV."""

import csv
import io
import itertools
import random

import pytest

from infra_agent.tools.base import AgentError
from infra_agent.tools.common.sweep import (
    MAX_GRID_POINTS,
    Budget,
    Range,
    Space,
    csv_text,
    pareto_front,
)


def test_ranges_and_lists_make_the_product_in_a_fixed_order():
    space = Space.of({"BLOCK_N": Range(start=32, stop=256, factor=2), "num_warps": [2, 4, 4]}, None)
    assert space.dimensions == {"BLOCK_N": (32, 64, 128, 256), "num_warps": (2, 4)}
    grid = space.grid()
    assert space.size == len(grid) == 8
    assert grid[:3] == [
        {"BLOCK_N": 32, "num_warps": 2},
        {"BLOCK_N": 32, "num_warps": 4},
        {"BLOCK_N": 64, "num_warps": 2},
    ]
    assert Range(start=1, stop=2, step=0.5).values() == [1, 1.5, 2]


@pytest.mark.parametrize(
    "rule, plain",
    [
        # a range of one value, below zero: its stop is its start
        ({"start": -1, "stop": -1, "step": 1}, [-1]),
        ({"start": -4, "stop": -1, "step": 1}, list(range(-4, 0))),
        # the cap's neighbours and past it: a space's size counts every value
        ({"start": 1, "stop": 257, "step": 1}, list(range(1, 258))),
        ({"start": 1, "stop": 1000, "step": 1}, list(range(1, 1001))),
        ({"start": 1, "stop": 2.0**300, "factor": 2}, [2**i for i in range(301)]),
        ({"start": 0.1, "stop": 0.3, "step": 0.1}, [0.1, 0.2, 0.3]),
        ({"start": 3, "stop": 3, "factor": 2}, [3]),
    ],
)
def test_a_range_has_every_value_from_start_to_stop(rule, plain):
    """The sizes checked against a plain-Python enumeration of the same range."""
    space = Space.of({"A": Range(**rule)}, None)
    assert list(space.dimensions["A"]) == plain
    assert space.size == len(plain)


def test_a_range_too_long_for_a_dimension_is_refused():
    with pytest.raises(AgentError, match="raise step or factor"):
        Space.of({"A": Range(start=0, stop=1e9, step=1)}, None)


def test_an_explicit_list_is_kept_as_given_without_repeats():
    configs = [{"A": 1, "B": 2}, {"A": 3, "B": 2}, {"A": 1, "B": 2}]
    space = Space.of(None, configs)
    assert space.grid() == configs[:2] and space.dimensions == {"A": (1, 3), "B": (2,)}


@pytest.mark.parametrize(
    "space, configs, says",
    [
        (None, None, "the space is empty"),
        ({"A": []}, None, "has no values"),
        ({"A": [1]}, [{"A": 1}], "not both"),
        (None, [{"A": 1}, {"B": 1}], "same keys"),
    ],
)
def test_bad_spaces_are_refused_with_what_to_do(space, configs, says):
    with pytest.raises(AgentError, match=says):
        Space.of(space, configs)


def test_a_space_over_the_cap_says_its_size_and_the_cap():
    space = Space.of({"A": list(range(20)), "B": list(range(20))}, None)
    assert space.size == 400 > MAX_GRID_POINTS
    with pytest.raises(
        AgentError, match=rf"400 configs \(20 A x 20 B\), over the cap of {MAX_GRID_POINTS}"
    ):
        space.grid()
    with pytest.raises(ValueError, match="exactly one of step or factor"):
        Range(start=1, stop=4)


def test_the_front_is_what_no_other_point_beats_on_both_axes():
    rng = random.Random(0)
    points = [(rng.randint(0, 20), rng.randint(0, 20)) for _ in range(60)]
    front = pareto_front(points)
    # Independently: sort by x descending, keep a point when its y beats every y seen so far.
    best, expected = -1, set()
    for x, group in itertools.groupby(sorted(set(points), reverse=True), key=lambda p: p[0]):
        top = max(y for _, y in group)
        if top > best:
            expected.add((x, top))
            best = top
    assert {points[i] for i in front} == expected
    assert [points[i][0] for i in front] == sorted(points[i][0] for i in front)


def test_csv_reads_back_as_written():
    rows = [{"config": "BLOCK_N=64", "ms": 1.5, "dropped": ""}, {"config": "x", "extra": [1, 2]}]
    back = list(csv.DictReader(io.StringIO(csv_text(rows))))
    assert back[0] == {"config": "BLOCK_N=64", "ms": "1.5", "dropped": "", "extra": ""}
    assert back[1]["extra"] == "[1, 2]"


def test_the_budget_ends_on_trials_or_wall_time():
    budget = Budget(wall_s=1e6, trials=2)
    assert budget.spent() is None and budget.eta(3) == "ETA unknown"
    budget.done = 2
    assert "trial budget (2)" in (budget.spent() or "")
    assert "wall-clock budget" in (Budget(wall_s=1e-9, trials=None).spent() or "")
