"""Issue 20: check_numerics names each honest mistake for what it is, keeps the cases that
ran when one dtype cannot compile, and says what ran."""

import re

import pytest
from conftest import call
from numerics_cheats import (
    COMPUTES_NAN,
    FLOAT32_ONLY,
    NATIVE_DTYPE_ADD,
    OFF_BY_ONE_MASK,
    TORCH_ONLY,
    TORCH_ONLY_WITH_TRITON_IMPORT,
    rmsnorm_missing_last_column,
)

from infra_agent.kernels.workspace import load_workspace

pytestmark = pytest.mark.anyio

# one case per dtype, as made (layouts: test_check_numerics_layouts.py)
VECTOR = {
    "kernel": "vector_add",
    "entry": "vector_add",
    "shapes": [{"N": 300}],
    "trials": 2,
    "layouts": [],
}


async def test_a_bug_both_runs_share_is_no_partition_mismatch(zoo_client, zoo_workspace):
    # rows split across 2 ranks (the spec's partition); the last column of every row is never
    # stored, so partitioned and unpartitioned agree bit for bit and both miss the reference
    kernel = load_workspace(zoo_workspace).kernel("rmsnorm")
    source = rmsnorm_missing_last_column((kernel.folder / "rmsnorm_triton.py").read_text())
    source = source.replace("from reference import EPS", "EPS = 1e-6")  # reference.py's value
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="rmsnorm",
        source=source,
        entry="rmsnorm",
        shapes=[{"M": 4, "N": 64}],
        dtypes=["float32"],
        trials=2,
    )
    part = out["cases"][0]["partition"]
    assert out["verdict"] == "fail" and part["partitioned_vs_unpartitioned_rel_l2"] == 0
    assert [f["code"] for f in out["findings"]] == ["unwritten_output"], out["findings"]
    assert "first at [0, 63]" in out["findings"][0]["message"]


async def test_a_computed_nan_is_not_called_unwritten(zoo_client):
    out = await call(
        zoo_client, "check_numerics", source=COMPUTES_NAN, dtypes=["float32"], **VECTOR
    )
    assert out["verdict"] == "fail" and out["cases"][0]["errors"]["worst_index"] == [7]
    assert [f["code"] for f in out["findings"]] == ["nonfinite_output"], out["findings"]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
async def test_an_unwritten_element_is_found_by_its_sentinel_in_every_float_dtype(
    zoo_client, dtype
):
    out = await call(
        zoo_client,
        "check_numerics",
        source=OFF_BY_ONE_MASK,
        dtypes=[dtype],
        checks=["unwritten"],
        **VECTOR,
    )
    (finding,) = out["findings"]
    assert finding["code"] == "unwritten_output" and "1 elements" in finding["message"]
    assert "first at [299]" in finding["message"]


@pytest.mark.parametrize(
    "how, why",
    [
        ("impl", "the spec names the impl 'triton'"),
        ("path", "its file is named 'mine_triton.py'"),
        ("source", "its module imports triton"),
        ("decoy", "its module imports triton"),
    ],
)
async def test_a_triton_impl_that_launches_nothing_is_a_finding(
    zoo_client, zoo_workspace, how, why
):
    # torch only, no @triton.jit anywhere (no decoy): declared Triton by the spec's impl name,
    # by its file's name, or by importing triton
    args = {"kernel": "vector_add", "shapes": [{"N": 300}], "dtypes": ["float32"], "trials": 2}
    impl_file = zoo_workspace / "vector_add" / "vector_add_triton.py"
    honest = impl_file.read_text()
    if how == "impl":
        impl_file.write_text(TORCH_ONLY)
        args["impl"] = "triton"
    elif how == "path":
        (zoo_workspace / "mine_triton.py").write_text(TORCH_ONLY)
        args.update(path="mine_triton.py", entry="vector_add")
    elif how == "source":
        args.update(source=TORCH_ONLY_WITH_TRITON_IMPORT, entry="vector_add")
    else:  # an unused @triton.jit beside the torch code
        decoy = (
            TORCH_ONLY_WITH_TRITON_IMPORT + "\n\n@triton.jit\ndef unused_kernel(x_ptr):\n    pass\n"
        )
        args.update(source=decoy, entry="vector_add")
    try:
        out = await call(zoo_client, "check_numerics", **args)
    finally:
        impl_file.write_text(honest)  # the module's later tests check the zoo's own kernel
    assert out["verdict"] == "fail" and out["cases"][0]["triton_launches"] == 0
    (finding,) = out["findings"]
    assert finding["code"] == "no_triton_launch" and why in finding["message"], finding
    assert "aten::add" in finding["message"]


async def test_bf16_arithmetic_in_the_interpreter_is_named_as_a_suspect(zoo_client):
    native = await call(
        zoo_client,
        "check_numerics",
        source=NATIVE_DTYPE_ADD,
        dtypes=["bfloat16", "float16"],
        **VECTOR,
    )
    if native["device"] != "cpu":  # compiled kernels compute bf16 right: nothing to suspect
        assert native["verdict"] == "pass" and native["findings"] == []
        return
    bf16, fp16 = native["cases"]
    # measured: the interpreter multiplies and adds bf16 bit patterns; its fp16 arithmetic is right
    # (bit-pattern sums may be NaN/Inf too: then the error is unbounded, null; issue 34)
    rel_l2 = bf16["errors"]["rel_l2_error"]
    assert (
        bf16["verdict"] == "fail" and (rel_l2 is None or rel_l2 > 1) and fp16["verdict"] == "pass"
    )
    suspects = [f for f in native["findings"] if f["code"] == "interpreter_bf16_suspect"]
    assert [f["case"] for f in suspects] == ["N=300 bfloat16"] and suspects[0][
        "severity"
    ] == "warning"
    assert (
        "upcast to float32" in suspects[0]["message"] and "run on a GPU" in suspects[0]["message"]
    )
    assert (
        "suspect: the Triton interpreter computes bfloat16 arithmetic wrongly" in native["summary"]
    )
    # the confirmation the finding proposes: the zoo's kernel upcasts, and passes in bf16
    upcast = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        shapes=[{"N": 300}],
        dtypes=["bfloat16"],
        trials=2,
    )
    assert upcast["verdict"] == "pass" and upcast["findings"] == []


async def test_a_dtype_that_does_not_compile_is_a_case_error_at_the_kernel_line(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        source=FLOAT32_ONLY,
        dtypes=["float32", "float16"],
        **VECTOR,
        expect=["num_raised_cases == 1", "case_verdict == 'pass'"],
    )
    conditions = out["hypothesis_answer"]["conditions"]
    assert [c["answer"] for c in conditions] == ["supported", "contradicted"]  # float16 has no pass
    fp32, fp16 = out["cases"]
    assert (
        fp32["verdict"] == "pass"
        and fp32["error"] is None
        and fp32["errors"]["rel_l2_error"] < 1e-6
    )
    assert fp16["verdict"] == "fail" and fp16["errors"] is None
    assert fp16["error"].startswith(
        "candidate.py:11:5: AssertionError: this kernel is float32 only"
    ), fp16["error"]
    assert "tl.static_assert(x.dtype == tl.float32" in fp16["error"]
    assert out["verdict"] == "fail" and [f["code"] for f in out["findings"]] == ["candidate_raised"]
    assert out["findings"][0]["case"] == "N=300 float16"
    assert "1 case(s) raised (N=300 float16): candidate.py:11:5" in out["summary"]


async def test_the_summary_names_what_ran(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="rmsnorm",
        impl="triton",
        shapes=[{"M": 3, "N": 40}, {"M": 2, "N": 64}],
        dtypes=["float32", "float16"],
        trials=1,
    )
    assert re.match(
        r"PASS: rmsnorm/triton on shapes \[M=3 N=40; M=2 N=64\] x dtypes \[float32, float16\] "
        r"\+ layouts \[padded_rows\]: 6 case\(s\), 0 failed",
        out["summary"],
    ), out["summary"]
    path = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        path="vector_add/vector_add_triton.py",
        entry="vector_add",
        shapes=[{"N": 64}],
        dtypes=["float32"],
        trials=1,
    )
    assert path["summary"].startswith(
        "PASS: vector_add/vector_add_triton.py:vector_add on shapes [N=64] x dtypes [float32]"
    ), path["summary"]
