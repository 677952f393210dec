from infra_agent.kernels.schema import Arg, KernelSpec, Partition, Tolerance

SPEC = KernelSpec(
    name="rmsnorm_gated",
    description="y = x / sqrt(mean(x^2, -1) + eps) * weight * silu(gate): the fused FP32 RMSNorm and SiLU output "
    "gate of a linear-attention layer (per head over V, or over the hidden size), several rows per program.",
    reference="reference.py:rmsnorm_gated",
    impls={"triton": "rmsnorm_gated_triton.py:rmsnorm_gated"},
    args=(Arg("x", ("M", "N")), Arg("gate", ("M", "N")), Arg("weight", ("N",), distribution="positive")),
    shapes={
        "cpu": ({"M": 5, "N": 64}, {"M": 19, "N": 100}),
        # decode (1 token x 32 heads of V = 128), prefill (4096 tokens x 32 heads), a whole hidden row
        "gpu": ({"M": 32, "N": 128}, {"M": 131072, "N": 128}, {"M": 4096, "N": 4096}),
    },
    dtypes=("float32", "float16", "bfloat16"),
    # per element: square, add (sum), multiply by rstd, by weight; silu = sigmoid (exp, add, divide) and a
    # multiply, times y: ~9; plus one rsqrt per row
    flops=lambda s: 9 * s["M"] * s["N"] + s["M"],
    # read x and gate, write y, read weight once
    bytes=lambda s, itemsize: (3 * s["M"] * s["N"] + s["N"]) * itemsize,
    tolerances={
        "float32": Tolerance(rel_l2=1e-5, why="fp32 sum of N squares, error ~sqrt(N)*2^-24, and fp32 sigmoid"),
        "float16": Tolerance(rel_l2=2e-3, why="fp32 accumulation, one fp16 rounding of y (2^-11)"),
        "bfloat16": Tolerance(rel_l2=1e-2, why="fp32 accumulation, one bf16 rounding of y (2^-8)"),
    },
    # Rows are independent: splitting M across ranks and concatenating is exact.
    partition=Partition(args={"x": 0, "gate": 0}, num_parts=2, combine="concat", out_dim=0),
    forbidden_ops=("aten::pow", "aten::mean", "aten::rsqrt", "aten::rms_norm", "aten::sigmoid", "aten::silu",
                   "aten::mul"),
    extra={"eps": 1e-6},
)
