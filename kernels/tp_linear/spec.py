from infra_agent.kernels.schema import Arg, KernelSpec, Partition, Tolerance

SPEC = KernelSpec(
    name="tp_linear",
    description="y = x @ w.T as a row-parallel tensor-parallel linear (K split across ranks, partial "
    "outputs summed): the case study where TF32 shards diverge from the FP32 result and 3xTF32 fixes it.",
    reference="reference.py:linear",
    impls={
        "tf32x3": "tp_linear_triton.py:linear_tf32x3",
        "tf32": "tp_linear_triton.py:linear_tf32",
    },
    args=(Arg("x", ("M", "K")), Arg("w", ("N", "K"))),
    shapes={
        "cpu": ({"M": 16, "N": 32, "K": 256}, {"M": 24, "N": 40, "K": 384}),
        "gpu": ({"M": 128, "N": 4096, "K": 4096}, {"M": 4096, "N": 4096, "K": 8192}),
    },
    dtypes=("float32",),
    flops=lambda s: 2 * s["M"] * s["N"] * s["K"],
    # read x and w, write y
    bytes=lambda s, itemsize: (s["M"] * s["K"] + s["N"] * s["K"] + s["M"] * s["N"]) * itemsize,
    tolerances={
        # FP32 products, FP32 accumulation over K: error ~ sqrt(K) * 2^-24 relative; 1e-5 leaves
        # ~10x headroom at K = 8192. TF32 operands (2^-11) cannot meet it; 3xTF32 does.
        "float32": Tolerance(rel_l2=1e-5, why="fp32 accumulation over K terms, error ~sqrt(K)*2^-24"),
    },
    # Row-parallel: x's columns and w's columns (the reduction dim K) split across ranks;
    # each rank's [M, N] partial output is summed in rank order (an all-reduce).
    partition=Partition(args={"x": 1, "w": 1}, num_parts=4, combine="sum"),
    forbidden_ops=("aten::mm", "aten::matmul", "aten::addmm", "aten::bmm", "aten::linear"),
)
