"""matmul_tf32x3 through MCP, as an agent would call it: all three implementations (ieee,
tf32, tf32x3) pass check_numerics at the spec's TF32-class tolerance with zero findings;
held to FP32 accuracy (tolerance=1e-5, tp_linear's bound) the emulated TF32 fails by ~77x
and 3xTF32 passes; on sm_90a the TF32 impls run on tensor cores (3xTF32 with 3x the
HGMMAs) and ieee on FFMA; all compile for gfx942.

A person should look at: the two strict-check errors (the README's table).
"""

import pytest
from conftest import call

pytestmark = pytest.mark.anyio


def worst_error(out: dict) -> float:
    return max(c["errors"]["rel_l2_error"] for c in out["cases"])


async def test_every_impl_passes_the_spec_tolerance_and_only_tf32_misses_fp32(zoo_client):
    errors = {}
    for impl in ("ieee", "tf32", "tf32x3"):
        out = await call(zoo_client, "check_numerics", kernel="matmul_tf32x3", impl=impl, trials=2)
        assert out["findings"] == [] and out["verdict"] == "pass", out["summary"]
        # 3 shapes as made, the smallest also with padded rows
        assert [c["layout"] for c in out["cases"]] == ["as_made"] * 3 + ["padded_rows"]
        assert all(c["tolerance_source"] == "spec" for c in out["cases"])
        assert all(
            c["triton_launches"] >= 2 and "aten::mm" not in c["aten_ops"] for c in out["cases"]
        )
        errors[impl] = [c["errors"]["rel_l2_error"] for c in out["cases"]]
    # truncated TF32 operands: ~7.7e-4 at K = 64 and at K = 1024 alike (relative error does not grow with K)
    assert all(5e-4 < e < 1e-3 for e in errors["tf32"]), errors
    assert max(errors["ieee"]) < 3e-7 and max(errors["tf32x3"]) < 1e-6, errors

    shape = [{"M": 24, "N": 40, "K": 384}]
    strict = {
        impl: await call(
            zoo_client,
            "check_numerics",
            kernel="matmul_tf32x3",
            impl=impl,
            shapes=shape,
            trials=1,
            tolerance=1e-5,
            hypothesis=f"{impl} has FP32 accuracy",
        )
        for impl in ("tf32", "tf32x3")
    }
    assert strict["tf32"]["verdict"] == "fail" and worst_error(strict["tf32"]) > 50 * 1e-5
    assert strict["tf32x3"]["verdict"] == "pass" and worst_error(strict["tf32x3"]) < 0.1 * 1e-5
    assert strict["tf32"]["cases"][0]["tolerance_source"] == "argument"


async def test_tensor_cores_on_sm_90a_and_every_impl_compiles_for_gfx942(zoo_client):
    mix = {}
    for impl in ("ieee", "tf32", "tf32x3"):
        out = await call(
            zoo_client, "compile_kernel", kernel="matmul_tf32x3", impl=impl, target="sm_90a"
        )
        (k,) = out["kernels"]
        assert k["spill_stores_bytes"] == 0 and k["constexprs"]["MODE"] == [
            "ieee",
            "tf32",
            "tf32x3",
        ].index(impl)
        mix[impl] = k["instruction_mix"]
        amd = await call(
            zoo_client, "compile_kernel", kernel="matmul_tf32x3", impl=impl, target="gfx942"
        )
        assert (
            amd["backend"] == "hip" and amd["kernels"][0]["instruction_mix"]["tensor_core_mma"] > 0
        )  # v_mfma
    assert mix["ieee"]["tensor_core_mma"] == 0 and mix["ieee"]["ffma"] > 0
    assert set(mix["tf32"]["tensor_core_ops"]) == {"HGMMA.64x64x8.F32.TF32"}
    assert mix["tf32x3"]["tensor_core_mma"] == 3 * mix["tf32"]["tensor_core_mma"] > 0


@pytest.mark.gpu
async def test_on_cuda_tensor_core_tf32_has_the_emulated_error(zoo_client):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    shape = [{"M": 128, "N": 256, "K": 1024}]
    errors = {}
    for impl in ("ieee", "tf32", "tf32x3"):
        out = await call(
            zoo_client, "check_numerics", kernel="matmul_tf32x3", impl=impl, shapes=shape, trials=2
        )
        assert out["device"] == "cuda" and out["verdict"] == "pass" and out["findings"] == [], out[
            "summary"
        ]
        errors[impl] = worst_error(out)
    assert 5e-4 < errors["tf32"] < 1e-3 and errors["tf32x3"] < 1e-6 and errors["ieee"] < 1e-6, (
        errors
    )
