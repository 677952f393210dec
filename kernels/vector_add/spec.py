from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="vector_add",
    description="out = x + y, elementwise over a 1-D vector: the smallest memory-bound kernel.",
    reference="reference.py:vector_add",
    impls={"triton": "vector_add_triton.py:vector_add"},
    args=(Arg("x", ("N",)), Arg("y", ("N",))),
    shapes={
        "cpu": ({"N": 1000}, {"N": 4096}, {"N": 12345}),
        "gpu": ({"N": 1 << 20}, {"N": 1 << 24}, {"N": 98_432_123}),
    },
    dtypes=("float32", "float16", "bfloat16"),
    flops=lambda s: s["N"],
    # read x and y, write out
    bytes=lambda s, itemsize: 3 * s["N"] * itemsize,
    tolerances={
        # One rounding of the exact sum: the only error is the output's own rounding.
        "float32": Tolerance(rel_l2=1e-6, why="one fp32 rounding (2^-24) per element"),
        "float16": Tolerance(rel_l2=1e-3, why="one fp16 rounding (2^-11) per element"),
        "bfloat16": Tolerance(rel_l2=8e-3, why="one bf16 rounding (2^-8) per element"),
    },
    partition=None,
)
