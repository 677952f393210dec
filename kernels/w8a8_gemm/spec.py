from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="w8a8_gemm",
    description="W8A8 linear: out = (a @ w^T) * a_scale[:, None] * w_scale[None, :] with int8 a [M, K] (one "
    "float32 scale per token), int8 w [N, K] (one scale per output channel), exact int32 accumulation and one "
    "dequantising epilogue; out has w_scale's dtype. The quantised linear layers of a W8A8 serving stack.",
    reference="reference.py:w8a8_gemm",
    impls={"triton": "w8a8_triton.py:w8a8_gemm"},
    args=(
        Arg("a", ("M", "K"), dtype="int8", distribution="int", low=-127, high=128),
        Arg("a_scale", ("M",), dtype="float32", distribution="positive"),
        Arg("w", ("N", "K"), dtype="int8", distribution="int", low=-127, high=128),
        Arg("w_scale", ("N",), distribution="positive"),
    ),
    shapes={
        "cpu": ({"M": 5, "N": 48, "K": 96}, {"M": 16, "N": 64, "K": 256}, {"M": 33, "N": 40, "K": 200}),
        # a decode batch, a prefill chunk, and an MLP up-projection at decode
        "gpu": ({"M": 64, "N": 4096, "K": 4096}, {"M": 4096, "N": 4096, "K": 4096}, {"M": 16, "N": 14336, "K": 4096}),
    },
    dtypes=("float32", "bfloat16", "float16"),
    make_inputs="w8a8_inputs.py:make_inputs",
    # a multiply and an add per (m, n, k), counted like FLOPs (they are int8 tensor-core ops); 2 per output
    flops=lambda s: 2 * s["M"] * s["N"] * s["K"] + 2 * s["M"] * s["N"],
    # int8 a and w, float32 a_scale, w_scale and out in the case dtype
    bytes=lambda s, itemsize: s["M"] * s["K"] + s["N"] * s["K"] + 4 * s["M"] + (s["N"] + s["M"] * s["N"]) * itemsize,
    tolerances={
        # the int32 sum is exact; then int32 -> fp32 (exact below 2^24), two fp32 multiplies, one output rounding
        "float32": Tolerance(rel_l2=1e-5, why="exact int32 accumulation, three fp32 roundings in the epilogue"),
        "float16": Tolerance(rel_l2=2e-3, why="exact int32 accumulation, fp32 epilogue, one fp16 rounding (2^-11)"),
        "bfloat16": Tolerance(rel_l2=1e-2, why="exact int32 accumulation, fp32 epilogue, one bf16 rounding (2^-8)"),
    },
    # the library int8 matmul (torch._int_mm) and scaled matmul are exactly the shortcut a custom kernel must not take
    forbidden_ops=("aten::_int_mm", "aten::_scaled_mm", "aten::mm", "aten::matmul", "aten::addmm", "aten::bmm",
                   "aten::linear"),
)
