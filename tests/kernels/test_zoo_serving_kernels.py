"""The serving kernels of the zoo (paged_attention_decode, kv_quant, w8a8_gemm) through MCP,
as an agent would call them: every implementation matches its reference on the CPU shapes
with zero findings, and every Triton implementation compiles for sm_90a and gfx942.

One server for the module: the checks share its warm sandbox. Shapes are the specs' own
small CPU sets (the Triton interpreter is slow); one trial per case keeps the file cheap
(fresh seeds every run: repeated runs cover more inputs).
"""

import pytest
from conftest import call

from infra_agent.kernels.workspace import load_workspace

pytestmark = pytest.mark.anyio


def assert_clean_pass(out: dict, num_cases: int) -> None:
    """`num_cases` as made, each dtype's smallest shape also with padded rows, all passing."""
    assert out["findings"] == [], out["findings"]
    assert out["verdict"] == "pass", out["summary"]
    made = [c for c in out["cases"] if c["layout"] == "as_made"]
    padded = [c for c in out["cases"] if c["layout"] == "padded_rows"]
    assert len(made) == num_cases and len(made) + len(padded) == len(out["cases"])
    assert {c["dtype"] for c in padded} == {c["dtype"] for c in made}
    for case in out["cases"]:
        assert case["tolerance_source"] in ("spec", "argument")
        assert case["triton_launches"] >= len(case["seeds"])  # the kernel ran in every trial


# ---- paged_attention_decode ---------------------------------------------------------------


async def test_paged_attention_decode_matches_reference(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="paged_attention_decode",
        impl="triton",
        dtypes=["float32", "bfloat16"],
        trials=1,
        hypothesis="the block-table walk with an online softmax matches dense attention",
    )
    assert_clean_pass(out, num_cases=6)
    fp32 = [c for c in out["cases"] if c["dtype"] == "float32"]
    assert max(c["errors"]["rel_l2_error"] for c in fp32) < 1e-6
    assert all(
        "aten::bmm" not in c["aten_ops"] and "aten::_softmax" not in c["aten_ops"]
        for c in out["cases"]
    )


PAGED_FILE = "paged_attention_decode/paged_attention_triton.py"


@pytest.mark.parametrize(
    "kernel, file, entry",
    [
        ("paged_attention_decode", "paged_attention_triton.py", "paged_attention_decode"),
        ("kv_quant", "kv_quant_triton.py", "quantize_int8"),
    ],
)
async def test_an_edited_copy_runs_from_source(zoo_client, kernel, file, entry):
    # the agent's loop: read the impl, change it, check it inline; the file must not need its folder
    spec_kernel = load_workspace().kernel(kernel)
    source = (spec_kernel.folder / file).read_text()
    out = await call(
        zoo_client,
        "check_numerics",
        kernel=kernel,
        source=source,
        entry=entry,
        dtypes=["float32"],
        trials=1,
        shapes=[dict(spec_kernel.spec.shapes["cpu"][0])],
    )
    assert_clean_pass(out, num_cases=1)


@pytest.mark.parametrize("fmt", ["int8", "fp8"])
async def test_paged_attention_over_a_quantized_cache_matches_reference(zoo_client, fmt):
    # the engine's path: kv_quant's kernels quantise the cache, the fused kernel decodes codes in registers
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="paged_attention_decode",
        path=PAGED_FILE,
        entry=f"attend_{fmt}_cache",
        reference=f"reference.py:attend_{fmt}_cache",
        dtypes=["float32"],
        trials=1,
        shapes=[
            {"B": 3, "Hq": 4, "Hkv": 2, "D": 16, "NB": 8, "BS": 4, "MB": 2},
            {"B": 2, "Hq": 8, "Hkv": 1, "D": 40, "NB": 9, "BS": 8, "MB": 3},
        ],
    )
    assert_clean_pass(out, num_cases=2)
    assert all(c["triton_launches"] == 3 for c in out["cases"])  # quantise K, quantise V, attend
    assert max(c["errors"]["rel_l2_error"] for c in out["cases"]) < 1e-6


# ---- kv_quant ------------------------------------------------------------------------------

KV_FILE = "kv_quant/kv_quant_triton.py"


async def test_kv_quant_int8_codes_and_scales_are_exact(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="kv_quant",
        dtypes=["float32", "bfloat16"],
        trials=1,
        hypothesis="per-(token, head) int8 codes and scales match the FP32 quantiser bit for bit",
    )
    assert_clean_pass(out, num_cases=6)
    assert all(c["errors"]["rel_l2_error"] == 0 for c in out["cases"])


async def test_kv_quant_fp8_codes_are_exact_despite_the_interpreters_fp8_cast(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="kv_quant",
        path=KV_FILE,
        entry="quantize_fp8",
        reference="reference.py:quantize_fp8",
        dtypes=["float32", "bfloat16"],
        trials=1,
    )
    assert_clean_pass(out, num_cases=6)
    assert all(c["errors"]["rel_l2_error"] == 0 for c in out["cases"])


@pytest.mark.parametrize(
    "fmt, codes",
    [
        ("int8", {"dtype": "int8", "low": -127, "high": 128}),
        (
            "fp8",
            {"dtype": "uint8", "low": 0, "high": 256},
        ),  # every e4m3 bit pattern, both NaNs included
    ],
)
async def test_kv_dequantize_matches_reference(zoo_client, fmt, codes):
    args = [
        {"name": "codes", "shape": ["T", "H", "D"], "distribution": "int", **codes},
        {  # the kernel reads scale packed (scale_ptr + row), as quantize writes it
            "name": "scale",
            "shape": ["T", "H"],
            "dtype": "float32",
            "distribution": "positive",
            "layout": "contiguous",
        },
    ]
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="kv_quant",
        path=KV_FILE,
        entry=f"dequantize_{fmt}",
        reference=f"reference.py:dequantize_{fmt}",
        args=args,
        dtypes=["float32"],
        trials=1,
        shapes=[{"T": 7, "H": 2, "D": 64}, {"T": 3, "H": 3, "D": 24}],
    )
    assert_clean_pass(out, num_cases=2)
    assert all(c["errors"]["rel_l2_error"] < 1e-7 for c in out["cases"])


@pytest.mark.parametrize("target", ["sm_90a", "gfx942"])
async def test_paged_attention_quantized_cache_variants_compile(zoo_client, target):
    plain = await call(zoo_client, "compile_kernel", kernel="paged_attention_decode", target=target)
    (k,) = plain["kernels"]
    for cache, codes in ((1, "*i8"), (2, "*u8")):
        signature = {**k["signature"], "k_ptr": codes, "v_ptr": codes}
        out = await call(
            zoo_client,
            "compile_kernel",
            path=PAGED_FILE,
            entry="paged_attention_decode_kernel",
            target=target,
            signature=signature,
            constexprs={**k["constexprs"], "CACHE": cache},
        )
        assert (
            out["kernels"][0]["constexprs"]["CACHE"] == cache
            and out["kernels"][0]["registers_per_thread"] > 0
        )


# ---- w8a8_gemm -----------------------------------------------------------------------------


async def test_w8a8_gemm_matches_reference_in_every_output_dtype(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="w8a8_gemm",
        trials=1,
        hypothesis="int32 accumulation is exact, so only the epilogue's roundings remain",
    )
    assert_clean_pass(out, num_cases=9)
    fp32 = [c for c in out["cases"] if c["dtype"] == "float32"]
    assert max(c["errors"]["rel_l2_error"] for c in fp32) < 2e-7
    assert all(
        "aten::_int_mm" not in c["aten_ops"] and "aten::mm" not in c["aten_ops"]
        for c in out["cases"]
    )


async def test_w8a8_gemm_library_int_mm_is_forbidden(zoo_client):
    shortcut = (
        "import torch\n"
        "def w8a8_gemm(a, a_scale, w, w_scale):\n"
        "    acc = torch._int_mm(a, w.t().contiguous())\n"
        "    return (acc.float() * a_scale[:, None] * w_scale.float()[None, :]).to(w_scale.dtype)\n"
    )
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="w8a8_gemm",
        source=shortcut,
        entry="w8a8_gemm",
        shapes=[{"M": 32, "N": 64, "K": 96}],
        dtypes=["float32"],
        trials=1,
    )
    assert out["verdict"] == "fail" and "forbidden_op" in [f["code"] for f in out["findings"]]


@pytest.mark.parametrize("kernel", ["paged_attention_decode", "kv_quant", "w8a8_gemm"])
@pytest.mark.parametrize("target", ["sm_90a", "gfx942"])
async def test_triton_impls_compile(zoo_client, kernel, target):
    describe = await call(zoo_client, "describe_kernel", kernel=kernel, include_source=False)
    for impl in describe["impls"]:
        out = await call(zoo_client, "compile_kernel", kernel=kernel, impl=impl, target=target)
        (k,) = out["kernels"]
        assert out["arch"].startswith(target[:5]) and 0 < k["registers_per_thread"] <= 512
        assert k["signature"], "the launch was inferred from the spec's GPU shape"


@pytest.mark.parametrize("target", ["sm_90a", "gfx942"])
async def test_kv_quant_fp8_and_dequantize_kernels_compile(zoo_client, target):
    fp8 = await call(
        zoo_client,
        "compile_kernel",
        kernel="kv_quant",
        path=KV_FILE,
        entry="quantize_fp8",
        target=target,
    )
    assert fp8["kernels"][0]["constexprs"]["FP8"] is True
    signature = {
        "codes_ptr": "*i8",
        "scale_ptr": "*fp32",
        "out_ptr": "*fp32",
        "stride_t": "i32",
        "stride_h": "i32",
        "num_rows": "i32",
        "H": "i32",
        "D": "i32",
    }
    for fp8_codes in (False, True):
        sig = {**signature, "codes_ptr": "*u8" if fp8_codes else "*i8"}
        out = await call(
            zoo_client,
            "compile_kernel",
            path=KV_FILE,
            entry="dequantize_kernel",
            target=target,
            signature=sig,
            constexprs={"ROWS": 16, "BLOCK_D": 128, "FP8": fp8_codes},
        )
        assert out["kernels"][0]["registers_per_thread"] > 0
