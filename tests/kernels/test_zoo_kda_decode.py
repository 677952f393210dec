"""kda_decode through MCP, as an agent would call it: both implementations (fused, vtiled)
match the float64 reference with zero findings on the spec's CPU shapes (both outputs, both
dtypes, head-parallel partition), compile for sm_90a and gfx942, and the V-tiled one carries
the redundant FP32 work its design implies (more FFMA and MUFU per output element in the SASS).

A person should look at: the per-output-element counts printed by the compile test (they are
the numbers in kernels/kda_decode/README.md).
"""

import pytest
from conftest import call

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("impl", ["fused", "vtiled"])
async def test_both_impls_match_the_reference_with_zero_findings(zoo_client, impl):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="kda_decode",
        impl=impl,
        trials=2,
        hypothesis=f"{impl} computes the KDA decode step and its new state",
    )
    assert out["findings"] == [] and out["verdict"] == "pass", out["summary"]
    assert {(c["dtype"], c["tolerance_source"]) for c in out["cases"]} == {
        ("float32", "spec"),
        ("bfloat16", "spec"),
    }
    assert len(out["cases"]) == 4  # 2 CPU shapes x 2 dtypes, as made only: the spec says why
    assert out["layout_notes"] and "padded_rows not tried on q, k, v" in out["layout_notes"][0]
    for case in out["cases"]:
        assert case["triton_launches"] >= 2 and "aten::bmm" not in case["aten_ops"]
        assert case["partition"][
            "is_within_tolerance"
        ]  # heads split across 2 ranks, outputs concatenated
        if case["dtype"] == "float32":
            assert case["errors"]["rel_l2_error"] < 1e-6  # FP32 throughout: ~1e-7 measured


def per_output_element(kernel: dict, field: str) -> float:
    """Static SASS count x threads per block / outputs per block: what one output element costs
    (a loop body counts once, so vtiled's loop of V / BLOCK_V trips is undercounted)."""
    return (
        kernel["instruction_mix"][field]
        * kernel["threads_per_block"]
        / kernel["constexprs"]["BLOCK_V"]
    )


async def test_both_compile_and_vtiled_does_redundant_fp32_work(zoo_client):
    fused = await call(
        zoo_client, "compile_kernel", kernel="kda_decode", impl="fused", target="sm_90a"
    )
    vtiled = await call(
        zoo_client,
        "compile_kernel",
        kernel="kda_decode",
        impl="vtiled",
        target="sm_90a",
        baseline=fused["experiment_id"],
    )
    (f,), (v,) = fused["kernels"], vtiled["kernels"]
    assert (f["constexprs"]["BLOCK_V"], v["constexprs"]["BLOCK_V"]) == (
        128,
        32,
    )  # the spec's K = V = 128 heads
    assert f["spill_stores_bytes"] == 0 and v["spill_stores_bytes"] == 0
    counts = {
        name: (per_output_element(f, name), per_output_element(v, name))
        for name in ("ffma", "mufu")
    }
    print("per output element (fused, vtiled):", counts)
    assert (
        counts["ffma"][1] > 1.5 * counts["ffma"][0]
    )  # the whole readout again for the row statistic
    assert counts["mufu"][1] > 2 * counts["mufu"][0]  # exp(g) and the L2 norms' rsqrt once per tile
    assert vtiled["diff"]  # the baseline diff lists what moved

    for impl in ("fused", "vtiled"):
        amd = await call(
            zoo_client, "compile_kernel", kernel="kda_decode", impl=impl, target="gfx942"
        )
        (k,) = amd["kernels"]
        assert (
            amd["backend"] == "hip"
            and k["spilled_registers"] == 0
            and k["instruction_mix"]["mufu"] > 0
        )


@pytest.mark.gpu
async def test_on_cuda_both_impls_pass_at_gpu_shapes(zoo_client):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for impl in ("fused", "vtiled"):
        out = await call(zoo_client, "check_numerics", kernel="kda_decode", impl=impl, trials=2)
        assert out["device"] == "cuda" and out["verdict"] == "pass" and out["findings"] == [], out[
            "summary"
        ]
        assert any(
            c["shape"]["K"] == 128 for c in out["cases"]
        )  # the GPU shapes that fit the numerics budget
