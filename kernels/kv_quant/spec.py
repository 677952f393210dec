from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

# The codes and scales are defined in FP32 arithmetic (reference.py), which the kernels
# reproduce bit for bit (measured: zero differing codes, including every fp8 tie). One code
# off by one step in a million elements would still pass this bound; a wrong rounding rule
# (truncation, ties away from zero) or a wrong scale does not.
_EXACT = "the quantiser is FP32 arithmetic the kernel reproduces bit for bit; 1e-6 admits ~1 code step in 1e6"

SPEC = KernelSpec(
    name="kv_quant",
    description="KV-cache quantisation to int8 with one FP32 scale per (token, head): scale = amax(|x|) / 127, "
    "codes = round_half_even(x / scale). What a serving engine runs when it writes K and V into an int8 cache. "
    "The same file has quantize_fp8 (float8_e4m3fn codes as uint8 bits, scale = amax / 448) and "
    "dequantize_int8/dequantize_fp8 (codes * scale -> float32), with references of the same names.",
    reference="reference.py:quantize_int8",
    impls={"triton": "kv_quant_triton.py:quantize_int8"},
    args=(Arg("x", ("T", "H", "D")),),
    shapes={
        "cpu": ({"T": 5, "H": 2, "D": 16}, {"T": 3, "H": 4, "D": 40}, {"T": 4, "H": 2, "D": 128}),
        # a decode step's new tokens, a long prefill, and a whole 64k-token cache layer
        "gpu": ({"T": 256, "H": 8, "D": 128}, {"T": 8192, "H": 8, "D": 128}, {"T": 65536, "H": 8, "D": 128}),
    },
    dtypes=("float32", "bfloat16", "float16"),
    # per element: abs, max, divide, two adds (rounding), clamp (2); one divide per row
    flops=lambda s: 7 * s["T"] * s["H"] * s["D"] + s["T"] * s["H"],
    # read x, write int8 codes and one fp32 scale per (token, head)
    bytes=lambda s, itemsize: s["T"] * s["H"] * s["D"] * (itemsize + 1) + 4 * s["T"] * s["H"],
    tolerances={dtype: Tolerance(rel_l2=1e-6, why=_EXACT) for dtype in ("float32", "bfloat16", "float16")},
    forbidden_ops=("aten::round", "aten::amax", "aten::max", "aten::abs", "aten::div", "aten::clamp",
                   "aten::_quantize_per_tensor", "aten::quantize_per_channel"),
    extra={
        "entries": {
            "quantize_int8": "x [T, H, D] -> (codes int8 [T, H, D], scale float32 [T, H])",
            "quantize_fp8": "x [T, H, D] -> (codes uint8 [T, H, D] = float8_e4m3fn bits, scale float32 [T, H])",
            "dequantize_int8": "(codes int8 [T, H, D], scale float32 [T, H]) -> float32 [T, H, D]",
            "dequantize_fp8": "(codes uint8 [T, H, D], scale float32 [T, H]) -> float32 [T, H, D]",
        },
    },
)
