from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="matmul_tf32x3",
    description="c = a @ b with float32 storage, three ways: 'ieee' (FP32 products on CUDA cores), 'tf32' "
    "(operands truncated to 10 mantissa bits, tensor cores; emulated exactly on CPU) and 'tf32x3' (hi/lo split, "
    "three TF32 products, FP32 accuracy). The spec's tolerance is TF32-class (what allow_tf32 accepts); pass "
    "tolerance=1e-5 to hold an impl to FP32 accuracy, which tf32 fails and tf32x3 meets.",
    reference="reference.py:matmul",
    impls={
        "ieee": "matmul_triton.py:matmul_ieee",
        "tf32": "matmul_triton.py:matmul_tf32",
        "tf32x3": "matmul_triton.py:matmul_tf32x3",
    },
    args=(Arg("a", ("M", "K")), Arg("b", ("K", "N"))),
    shapes={
        # ragged M and N (masks), and K from 64 to 1024: TF32's relative error does not grow with K
        "cpu": ({"M": 16, "N": 32, "K": 64}, {"M": 24, "N": 40, "K": 384}, {"M": 16, "N": 16, "K": 1024}),
        "gpu": ({"M": 128, "N": 4096, "K": 4096}, {"M": 4096, "N": 4096, "K": 4096},
                {"M": 2048, "N": 2048, "K": 16384}),
    },
    dtypes=("float32",),
    flops=lambda s: 2 * s["M"] * s["N"] * s["K"],  # the math's FLOPs; tf32x3 issues 3x as many products
    # read a and b, write c
    bytes=lambda s, itemsize: (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]) * itemsize,
    tolerances={
        # The contract is an fp32-storage matmul that may use TF32 math (torch's allow_tf32): operands
        # truncated to 10 mantissa bits give ~7.7e-4 relative L2 at any K (biased truncation, see README),
        # 2.6x under this bound. IEEE and 3xTF32 measure 1e-7..4e-7; tp_linear's FP32 bound (1e-5, there
        # the contract) is the tolerance= to check FP32 accuracy with.
        "float32": Tolerance(rel_l2=2e-3, why="TF32-class contract: 10-bit truncated operands, ~7.7e-4 at any K; "
                             "use tolerance=1e-5 for FP32 accuracy (ieee, tf32x3 pass it, tf32 does not)"),
    },
    partition=None,
    forbidden_ops=("aten::mm", "aten::matmul", "aten::addmm", "aten::bmm", "aten::linear"),
    extra={"fp32_rel_l2": 1e-5},
)
