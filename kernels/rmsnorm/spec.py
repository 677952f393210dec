from infra_agent.kernels.schema import Arg, KernelSpec, Partition, Tolerance

SPEC = KernelSpec(
    name="rmsnorm",
    description="y = x / sqrt(mean(x^2, -1) + eps) * weight, one row per program: "
    "a memory-bound reduction with an FP32 accumulator.",
    reference="reference.py:rmsnorm",
    impls={"triton": "rmsnorm_triton.py:rmsnorm"},
    args=(Arg("x", ("M", "N")), Arg("weight", ("N",), distribution="positive")),
    shapes={
        "cpu": ({"M": 4, "N": 64}, {"M": 7, "N": 100}, {"M": 16, "N": 256}),
        "gpu": ({"M": 1, "N": 4096}, {"M": 4096, "N": 4096}, {"M": 32768, "N": 8192}),
    },
    dtypes=("float32", "float16", "bfloat16"),
    # per element: square, add (sum), multiply by rstd, multiply by weight; plus one
    # rsqrt per row
    flops=lambda s: 4 * s["M"] * s["N"] + s["M"],
    # read x, write y, read weight once
    bytes=lambda s, itemsize: (2 * s["M"] * s["N"] + s["N"]) * itemsize,
    tolerances={
        # fp32 accumulation over N elements: error grows ~ sqrt(N) * 2^-24.
        "float32": Tolerance(rel_l2=1e-5, why="fp32 sum of N squares, error ~sqrt(N)*2^-24"),
        "float16": Tolerance(rel_l2=2e-3, why="fp32 accumulation, one fp16 rounding of y (2^-11)"),
        "bfloat16": Tolerance(rel_l2=1e-2, why="fp32 accumulation, one bf16 rounding of y (2^-8)"),
    },
    # Rows are independent: splitting M across ranks and concatenating is exact.
    partition=Partition(args={"x": 0}, num_parts=2, combine="concat", out_dim=0),
    forbidden_ops=("aten::pow", "aten::mean", "aten::rsqrt", "aten::rms_norm"),
)
