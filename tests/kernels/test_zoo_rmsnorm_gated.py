"""rmsnorm_gated through MCP, as an agent would call it: the Triton implementation matches
the float64 reference with zero findings on the spec's CPU shapes and dtypes (rows split
across 2 ranks as well) and compiles for sm_90a and gfx942.
"""

import pytest
from conftest import call

pytestmark = pytest.mark.anyio


async def test_matches_the_reference_with_zero_findings(zoo_client):
    out = await call(zoo_client, "check_numerics", kernel="rmsnorm_gated", trials=2)
    assert out["findings"] == [] and out["verdict"] == "pass", out["summary"]
    assert sorted({c["dtype"] for c in out["cases"]}) == ["bfloat16", "float16", "float32"]
    made = [c for c in out["cases"] if c["layout"] == "as_made"]
    assert len(made) == 6 and all(c["tolerance_source"] == "spec" for c in out["cases"])
    assert len(out["cases"]) == 9  # each dtype's smallest shape also with padded rows
    for case in made:
        assert case["triton_launches"] >= 2 and case["partition"]["is_within_tolerance"]
        assert not {"aten::sigmoid", "aten::rsqrt", "aten::mean"} & set(case["aten_ops"])
        if case["dtype"] == "float32":
            assert case["errors"]["rel_l2_error"] < 1e-6


@pytest.mark.parametrize("target", ["sm_90a", "gfx942"])
async def test_compiles_for_nvidia_and_amd(zoo_client, target):
    out = await call(zoo_client, "compile_kernel", kernel="rmsnorm_gated", target=target)
    (k,) = out["kernels"]
    assert (
        k["name"] == "rmsnorm_gated_kernel" and k["instruction_mix"]["mufu"] > 0
    )  # sigmoid and rsqrt
    assert (
        k["constexprs"]["BLOCK_M"] == 16 and k["constexprs"]["BLOCK_N"] == 128
    )  # 16 heads' rows per program
    assert (k["spill_stores_bytes"] or 0) == 0 and not k.get("spilled_registers")


@pytest.mark.gpu
async def test_on_cuda_it_passes_at_gpu_shapes(zoo_client):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    out = await call(zoo_client, "check_numerics", kernel="rmsnorm_gated", trials=2)
    assert out["device"] == "cuda" and out["verdict"] == "pass" and out["findings"] == [], out[
        "summary"
    ]
