"""One diff shape for compare_experiments and compile_kernel's baseline=."""

from infra_agent.tools.common.diff import Change, change, diff, flatten
from infra_agent.tools.compare_experiments import diff_results
from infra_agent.tools.compile_kernel.schema import Output as CompileOutput


def test_flatten_paths_skips_and_empty_containers():
    assert flatten({"a": {"b": [1, 2]}, "c": {}}) == {"a.b.0": 1, "a.b.1": 2, "c": {}}
    assert flatten({"a": {"b": 1}, "c": {}}, keep_empty=False) == {"a.b": 1}
    assert flatten({"summary": "x", "summary_2": 1, "s": {"summary": 2}}, skip=("summary",)) == {
        "summary_2": 1,
        "s.summary": 2,
    }


def test_change_has_delta_and_ratio_for_numbers_only():
    assert change("t_ms", 2.0, 1.5) == Change(
        field="t_ms", before=2.0, after=1.5, delta=-0.5, ratio=0.75
    )
    assert change("occ", 50.0, 66.67).delta == 16.67  # no float noise
    assert change("n", 0, 3).ratio is None and change("n", 0, 3).delta == 3
    assert change("verdict", "pass", "fail").delta is None
    assert change("flag", True, False).ratio is None


def test_diff_keeps_field_order_and_counts_absent_as_zero():
    before = {"regs": 40, "mix": {"ffma": 3}}
    after = {"regs": 32, "mix": {"ffma": 3, "mma": 8}}
    assert [c.field for c in diff(before, after)] == ["regs", "mix.mma"]
    assert diff(before, after)[1].before is None
    assert diff(before, after, absent_as_zero=("mix.",))[1] == Change(
        field="mix.mma", before=0, after=8, delta=8
    )


def test_both_tools_answer_in_the_same_shape():
    moved = diff_results(
        {"shapes": [{"median_ms": 2.0}], "verdict": "slower"},
        {"shapes": [{"median_ms": 1.0}], "verdict": "faster"},
    )
    assert moved["numeric_changes"] == [
        Change(field="shapes.0.median_ms", before=2.0, after=1.0, delta=-1.0, ratio=0.5)
    ]
    assert moved["changed_strings"][0].before == "slower"
    assert CompileOutput.model_fields["diff"].annotation == list[Change]


def test_seeds_and_indices_are_identifiers_not_numeric_changes():
    a = {
        "cases": [
            {
                "seeds": [11, 12],
                "first_mismatch_indices": [[3]],
                "worst_index": [3],
                "max_abs": 0.5,
                "partition": {"most_divergent_index": [7], "most_divergent_reference": 2.0},
            }
        ]
    }
    b = {
        "cases": [
            {
                "seeds": [21, 22],
                "first_mismatch_indices": [[9]],
                "worst_index": [9],
                "max_abs": 0.25,
                "partition": {"most_divergent_index": [1], "most_divergent_reference": -39.8},
            }
        ]
    }
    moved = diff_results(a, b)
    assert [c.field for c in moved["numeric_changes"]] == [
        "cases.0.max_abs",
        "cases.0.partition.most_divergent_reference",
    ]
    assert moved["num_identifiers_changed"] == 5  # 2 seeds, 3 indices
