"""Error metrics and the tolerance table, on tensors directly (no sandbox)."""

import pytest
import torch

from infra_agent.kernels.schema import Tolerance
from infra_agent.tools.common.error_metrics import (
    ERROR_FIELDS,
    compare,
    rel_l2,
    representable_fraction,
    round_to,
    ulp_size,
)
from infra_agent.tools.common.tolerance import DTYPE_TOLERANCES, resolve_tolerance


def test_tolerance_precedence_argument_spec_default():
    spec = {"float32": Tolerance(rel_l2=2e-5, why="spec reason", max_abs=1e-3)}
    assert resolve_tolerance("float32", spec, 0.1).source == "argument"
    tol = resolve_tolerance("float32", spec, None)
    assert (tol.rel_l2, tol.source, tol.max_abs) == (2e-5, "spec", 1e-3)
    tol = resolve_tolerance("bfloat16", spec, None)
    assert (tol.rel_l2, tol.source) == (DTYPE_TOLERANCES["bfloat16"][0], "dtype default")
    assert resolve_tolerance("tf32", None, None).rel_l2 == 5e-4
    with pytest.raises(KeyError):
        resolve_tolerance("int8", None, None)


def test_ulp_is_the_spacing_of_the_output_dtype():
    mags = torch.tensor([1.0, 1.5, 2.0, 0.0], dtype=torch.float64)
    assert ulp_size(mags, "float32").tolist()[:3] == [2.0**-23, 2.0**-23, 2.0**-22]
    assert (
        ulp_size(mags, "bfloat16")[0] == 2.0**-7 and ulp_size(mags, "float16")[3] == 2.0**-24
    )  # subnormal step


def test_compare_counts_ulps_mismatches_and_nonfinite():
    ref = torch.linspace(1, 2, 10, dtype=torch.float64)
    cand = ref.float().clone()
    cand[3] += 2 * 2.0**-23 * 1  # two fp32 ulps at [1, 2)
    cand[7] = float("nan")
    err = compare(cand, ref, "float32", 1e-5)
    assert err["nonfinite_mismatches"] == 1 and err["candidate_nan_count"] == 1
    assert (
        err["worst_index"] == [7]
        and err["first_mismatch_indices"] == [[7]]
        and err["num_mismatches"] == 1
    )
    assert err["worst_candidate"] is None
    # a NaN where the reference is finite leaves the error unbounded, not that of the rest
    assert all(err[k] == float("inf") for k in ERROR_FIELDS), err
    cand[7] = ref[7]
    assert 1.5 < compare(cand, ref, "float32", 1e-5)["ulp_max"] <= 2.5
    clean = compare(ref.float(), ref, "float32", 1e-5)
    assert clean["ulp_max"] <= 0.5 and clean["rel_l2_error"] < 1e-7 and clean["num_mismatches"] == 0
    shifted = ref.clone()
    shifted[2] += 0.5
    err = compare(shifted, ref, "float64", 1e-5)
    assert err["worst_index"] == [2] and err["max_abs_error"] == pytest.approx(0.5)
    assert rel_l2(shifted, ref) == pytest.approx(0.5 / float(ref.norm()))


def test_ulps_stay_finite_at_an_exact_zero_and_count_whole_steps_of_integers():
    # two independent ways: the spacing of an integer dtype is 1, so ULPs equal the absolute
    # error; a float64 reference of exactly 0 has the 5e-324 subnormal step as its ULP, so any
    # visible error is more ULPs than float64 holds and must saturate, not become inf/NaN
    ref = torch.tensor([0, 4, 8, 200], dtype=torch.int32)
    cand = torch.tensor([123456, 4, 9, 200], dtype=torch.int32)
    err = compare(cand, ref, "int32", 0.0)
    assert err["ulp_max"] == err["max_abs_error"] == 123456.0
    ref64 = torch.zeros(100, dtype=torch.float64)
    cand64 = ref64.clone()
    cand64[7] = 1e-10
    err = compare(cand64, ref64, "float64", 1e-5)
    finite = [err["ulp_p50"], err["ulp_p99"], err["ulp_max"]]
    assert all(v == v and v != float("inf") for v in finite), finite
    assert err["ulp_max"] == torch.finfo(torch.float64).max and err["worst_index"] == [7]


def test_lower_precision_shows_as_representable_values():
    x = torch.randn(4096, dtype=torch.float64)
    honest = x.float().double()
    assert representable_fraction(honest, "float16") < 0.01
    assert representable_fraction(x.half().double(), "float16") == 1.0
    assert representable_fraction(round_to(honest, "tf32"), "tf32") == 1.0
    assert representable_fraction(honest, "tf32") < 0.01
