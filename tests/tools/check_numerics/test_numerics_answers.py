"""check_numerics parses what its jobs answered once, at the boundary (answers.py), into typed
records: the candidate's word is typed and bounded there, and a record it bent is dropped."""

from pathlib import Path

from infra_agent.tools.check_numerics.answers import (
    Call,
    OutputFacts,
    RefFacts,
    candidate_run,
    reference_facts,
)

TENSOR = {
    "type": "Tensor",
    "is_tensor": True,
    "is_plain": True,
    "has_storage": True,
    "shape": [4, "8"],
    "dtype": "float32",
    "device": "cpu",
    "aliases_inputs": [1],
}


def test_the_candidates_calls_are_typed_bounded_and_bent_ones_dropped():
    calls = [
        {
            "key": "c0t0",
            "kind": "first",
            "index": "0",
            "ops": {"aten::add": "2"},
            "triton_launches": None,
            "outputs": [TENSOR, "not a dict", {"type": "Lazy" * 100, "is_tensor": 1}],
        },
        {
            "key": "c0t1",
            "kind": "repeat",
            "index": 1,
            "error": "boom",
            "traceback": "x" * 5000,
            "triton_launch_errors": [f"e{i}" for i in range(9)],
        },
        {"key": "c0t2", "kind": "first"},  # no index: dropped
        {
            "key": "c0t3",
            "kind": "first",
            "index": 3,
            "ops": {"aten::mm": "many"},
        },  # a bent count: dropped
        "junk",
    ]
    run = candidate_run(
        {"calls": calls, "is_triton": 1, "imports_triton": "yes", "tampered": ["torch.allclose"]},
        Path("/out"),
        compiles=2,
    )
    first, raised = run.calls
    assert first == Call(
        key="c0t0",
        kind="first",
        index=0,
        ops={"aten::add": 2},
        triton_launches=0,
        triton_launch_errors=(),
        interpreter_bf16_ops=0,
        outputs=(
            OutputFacts(
                type="Tensor",
                is_tensor=True,
                is_plain=True,
                has_storage=True,
                shape=[4, 8],
                dtype="float32",
                device="cpu",
                aliases_inputs=(1,),
            ),
            OutputFacts(type="Lazy" * 50, is_tensor=False, is_plain=False, has_storage=False),
        ),
    )
    assert raised.error == "boom" and len(raised.traceback) == 4000 and raised.outputs == ()
    assert raised.triton_launch_errors == ("e0", "e1", "e2", "e3", "e4")
    assert (run.is_triton, run.imports_triton, run.tampered) == (True, False, ("torch.allclose",))
    assert (run.out_dir, run.compiles) == (Path("/out"), 2)
    assert candidate_run("not a dict", None, 0).calls == ()


def test_the_references_facts_per_key():
    item = {
        "ops": ["aten::mm"],
        "native_outputs": [{"dtype": "float16"}, "?"],
        "inputs": [{"all_zero": True}, {"all_zero": False}],
        "outputs": [{"is_constant": 1}],
    }
    facts = reference_facts({"items": {"c0t0": item, "c0t1": {"inputs": ["bent"]}, "c0t2": {}}})
    assert facts == {
        "c0t0": RefFacts(
            ops=("aten::mm",),
            native_dtypes=("float16", None),
            all_zero_inputs=(True, False),
            constant_outputs=(True,),
        ),
        "c0t2": RefFacts(),
    }
    assert reference_facts(None) == {} and reference_facts({"items": ["c0t0"]}) == {}
