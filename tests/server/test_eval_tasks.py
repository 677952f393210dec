"""Issue 38: the eval's tasks as data (seeded variants, workspaces that load) and its grading
by ground truth, read off recorded ledger rows. No model and no tool runs here."""

from __future__ import annotations

import pytest

from infra_agent.kernels.workspace import load_workspace
from infra_agent.server.eval.grade import grade
from infra_agent.server.eval.kernel_tasks import FAMILIES
from infra_agent.server.eval.submit import Input as Submission
from infra_agent.server.eval.tasks import Cause, generate_tasks


def test_a_seed_draws_the_same_tasks_and_another_seed_other_variants():
    first, again = generate_tasks(7), generate_tasks(7)
    assert [t.model_dump() for t in first] == [t.model_dump() for t in again]
    assert [t.id for t in first] == [f"kernel.{name}" for name in FAMILIES]
    variants = {
        seed: {
            t.id: (t.params["kernel"], t.truth.location.impl, str(t.params["shapes"]))
            for t in generate_tasks(seed)
        }
        for seed in range(6)
    }
    for task_id in variants[0]:
        assert len({variants[s][task_id] for s in variants}) > 1, task_id  # the seed varies it
    buggy = {variants[s]["kernel.stride"][1] for s in variants}
    assert len(buggy) > 1  # which impl carries the bug is drawn too
    controls = [t for t in first if t.control]
    assert len(controls) >= 2 and all(
        t.truth.cause == Cause.none and t.truth.location.impl is None for t in controls
    )
    assert all(
        not t.control and t.truth.location.impl in t.params["impls"]
        for t in first
        if t.id not in {c.id for c in controls}
    )


def test_only_selects_tasks_and_an_unknown_name_says_which_exist():
    assert [t.id for t in generate_tasks(0, ["kernel.stride", "tail_mask"])] == [
        "kernel.stride",
        "kernel.tail_mask",
    ]
    with pytest.raises(ValueError, match="unknown task.*kernel.nope.*the tasks are kernel.stride"):
        generate_tasks(0, ["kernel.nope"])


@pytest.mark.parametrize("seed", [0, 1])
def test_every_task_builds_a_workspace_whose_spec_loads(tmp_path, seed):
    for task in generate_tasks(seed):
        root = task.build_workspace(tmp_path / str(seed) / task.family)
        ws = load_workspace(root)
        assert not ws.errors and list(ws.kernels) == [task.params["kernel"]], ws.errors
        spec = ws.kernels[task.params["kernel"]].spec
        assert list(spec.impls) == task.params["impls"]
        assert task.params["kernel"] in task.question and all(
            i in task.question for i in spec.impls
        )
        assert task.truth.cause.value not in task.question  # the question does not give it away


# ---- grading, on ledger rows as the server records them ---------------------------------------


def _numerics(eid, impl, verdict, cases, codes=()):
    return {
        "id": eid,
        "tool": "check_numerics",
        "status": "ok",
        "kernel": "k",
        "arguments": {"kernel": "k", "impl": impl},
        "result": {
            "verdict": verdict,
            "candidate": f"k/{impl}",
            "cases": [
                {"verdict": v, "layout": layout, "dtype": dtype} for v, layout, dtype in cases
            ],
            "findings": [{"code": c} for c in codes],
        },
    }


def _task(family, seed=0):
    (task,) = generate_tasks(seed, [family])
    return task.model_copy(
        update={
            "truth": task.truth.model_copy(
                update={"location": task.truth.location.model_copy(update={"kernel": "k"})}
            )
        }
    )


def test_grading_needs_the_cause_the_place_and_evidence_that_shows_it():
    task = _task("stride")
    impl, other = (
        task.truth.location.impl,
        next(i for i in task.params["impls"] if i != task.truth.location.impl),
    )
    ledger = {
        "e1": _numerics(
            "e1", impl, "fail", [("pass", "as_made", "float32"), ("fail", "padded_rows", "float32")]
        ),
        "e2": _numerics(
            "e2",
            other,
            "pass",
            [("pass", "as_made", "float32"), ("pass", "padded_rows", "float32")],
        ),
    }
    right = Submission(cause=Cause.stride_assumption, kernel="k", impl=impl, experiment_ids=["e1"])
    g = grade(task, right, ledger)
    assert g.correct and g.identified and g.localized and g.evidence_ok and g.number_ok is None

    wrong_impl = grade(task, right.model_copy(update={"impl": other}), ledger)
    assert not wrong_impl.correct and wrong_impl.identified and not wrong_impl.localized
    unsupported = grade(task, right.model_copy(update={"experiment_ids": ["e2"]}), ledger)
    assert not unsupported.evidence_ok and "not " + impl in unsupported.notes[-1]
    invented = grade(
        task, right.model_copy(update={"experiment_ids": ["e1", "e99999-ffff"]}), ledger
    )
    assert not invented.evidence_ok and "not in this ledger" in invented.notes[-1]
    bare = grade(task, right.model_copy(update={"experiment_ids": []}), ledger)
    assert not bare.correct and "no experiment cited" in bare.notes[-1]
    # a failing check that fails as made is no evidence of a stride assumption
    as_made = {"e3": _numerics("e3", impl, "fail", [("fail", "as_made", "float32")])}
    assert not grade(task, right.model_copy(update={"experiment_ids": ["e3"]}), as_made).evidence_ok
    assert not grade(task, None, ledger).submitted


def test_a_control_is_right_only_as_none_with_a_passing_check():
    task = _task("control_stride")
    a, b = task.params["impls"]
    ledger = {
        "e1": _numerics("e1", a, "pass", [("pass", "as_made", "float32")]),
        "e2": _numerics("e2", b, "pass", [("pass", "as_made", "float32")]),
    }
    none = Submission(cause=Cause.none, kernel="k", experiment_ids=["e1", "e2"])
    g = grade(task, none, ledger)
    assert g.correct and g.localized is None
    found = Submission(
        cause=Cause.accumulation_precision, kernel="k", impl=a, experiment_ids=["e1"]
    )
    g = grade(task, found, ledger)
    assert not g.correct and not g.identified and not g.evidence_ok  # a pass shows no bug


def test_the_number_counts_within_its_tolerance():
    task = _task("unlaunchable")
    impl, warps = task.truth.location.impl, task.truth.number
    row = {
        "id": "e1",
        "tool": "compile_kernel",
        "status": "ok",
        "kernel": "k",
        "arguments": {"kernel": "k", "impl": impl, "target": "sm_90a"},
        "result": {"notes": ["op_kernel cannot launch on this target: its threads_per_block ..."]},
    }
    claim = Submission(
        cause=Cause.unlaunchable_config,
        kernel="k",
        impl=impl,
        config_key="num_warps",
        number=warps,
        experiment_ids=["e1"],
    )
    assert grade(task, claim, {"e1": row}).correct
    off = grade(task, claim.model_copy(update={"number": warps / 2}), {"e1": row})
    assert not off.correct and off.number_ok is False and "num_warps" in off.notes[0]
    no_key = grade(task, claim.model_copy(update={"config_key": None}), {"e1": row})
    assert no_key.localized is False
    # a compile called without impl= (the spec's default) is read by what its answer names
    row["arguments"].pop("impl")
    row["result"]["summary"] = f"sm_90a: op_kernel (k/{impl} at N=16777216 float32) 14 regs"
    assert grade(task, claim, {"e1": row}).evidence_ok
    row["result"]["summary"] = "sm_90a: op_kernel (k/other at N=16777216 float32) 14 regs"
    assert not grade(task, claim, {"e1": row}).evidence_ok


def test_nondeterminism_is_shown_by_the_finding_even_when_the_verdict_passes():
    task = _task("nondeterminism")
    impl = task.truth.location.impl
    row = _numerics(
        "e1", impl, "pass", [("pass", "as_made", "float32")], codes=["nondeterministic"]
    )
    claim = Submission(cause=Cause.nondeterminism, kernel="k", impl=impl, experiment_ids=["e1"])
    assert grade(task, claim, {"e1": row}).correct
    steady = _numerics("e2", impl, "pass", [("pass", "as_made", "float32")])
    assert not grade(
        task, claim.model_copy(update={"experiment_ids": ["e2"]}), {"e2": steady}
    ).evidence_ok
    # and a check that saw it is no evidence that nothing is wrong
    control = _task("control_elementwise")
    none = Submission(cause=Cause.none, kernel="k", experiment_ids=["e1"])
    assert not grade(control, none, {"e1": row}).evidence_ok
