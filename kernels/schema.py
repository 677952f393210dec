"""The kernel spec format: what a workspace declares about one kernel.

A spec is plain Python data (no torch import): the server reads it without paying for
torch, and the sandbox worker turns it into tensors. Code is named by
``"file.py:function"`` relative to the kernel's folder, so the same reference can be
loaded inside a worker (the trust boundary) and never in the server process.

A kernel folder ``<workspace>/<name>/spec.py`` defines ``SPEC = KernelSpec(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

# Shapes are dicts of named sizes, e.g. {"M": 4, "N": 64}; an argument's shape is a
# tuple of those names (or ints), e.g. ("M", "N").
Shape = dict[str, int]

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")

# Bytes per element by dtype name (what a cost model's `bytes(shape, itemsize)` takes),
# known without importing torch in the server process.
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
            "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


@dataclass(frozen=True)
class Arg:
    """One positional argument of the kernel's entry function."""

    name: str
    shape: tuple[str | int, ...]
    # "like:<dtype-arg>" is not needed: a float argument takes the case dtype unless
    # `dtype` pins it (e.g. int32 indices).
    dtype: str | None = None
    # How values are drawn: "normal" (N(0,1)), "uniform" ([-1, 1)), "positive"
    # (|N(0,1)| + 0.5, for scales), "int" (uniform integers in [low, high)).
    distribution: Literal["normal", "uniform", "positive", "int"] = "normal"
    low: int = 0
    high: int = 2**16
    # The layouts the kernel accepts for this argument (sandbox/worker/layouts.py), which
    # check_numerics tries besides the layout as made: "last_dim_contiguous" (default, as
    # most serving kernels assert: padded rows, a storage offset, a slice of a fused
    # projection), "contiguous" (only as made: say why in a comment), or "any" (strided
    # and transposed last dimensions too).
    layout: Literal["any", "last_dim_contiguous", "contiguous"] = "last_dim_contiguous"

    def dims(self, shape: Shape) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else shape[d] for d in self.shape)


@dataclass(frozen=True)
class Tolerance:
    """Acceptance for one dtype: the relative L2 error allowed, and why it is that."""

    rel_l2: float
    why: str
    max_abs: float | None = None


@dataclass(frozen=True)
class Partition:
    """How the kernel splits across simulated tensor-parallel ranks.

    `args` maps an argument name to the dimension it is split along (arguments not
    named are replicated). `combine` says how per-rank outputs form the whole:
    "concat" along `out_dim`, or "sum" (an all-reduce, summed in rank order).
    """

    args: dict[str, int]
    num_parts: int = 2
    combine: Literal["concat", "sum"] = "concat"
    out_dim: int = 0


@dataclass(frozen=True)
class KernelSpec:
    name: str
    description: str
    reference: str  # "reference.py:fn" — a torch function, run in float64 where possible
    impls: dict[str, str]  # impl name -> "file.py:fn"
    args: tuple[Arg, ...]
    shapes: dict[str, tuple[Shape, ...]]  # "cpu" (small, interpreter-friendly) and "gpu"
    dtypes: tuple[str, ...]
    flops: Callable[[Shape], float]  # floating-point operations for one call
    bytes: Callable[[Shape, int], float]  # bytes moved for one call, given the itemsize
    tolerances: dict[str, Tolerance]  # per dtype
    partition: Partition | None = None
    # aten ops an implementation may not dispatch, e.g. ("aten::mm",) for a "custom
    # kernel" that must not call the library matmul. Checked by the op audit.
    forbidden_ops: tuple[str, ...] = ()
    # Optional "file.py:fn(shape, dtype, generator) -> list[Tensor]" for inputs the
    # declarative `args` cannot express.
    make_inputs: str | None = None
    extra: dict = field(default_factory=dict)

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)


def split_ref(ref: str) -> tuple[str, str]:
    """'file.py:fn' -> ('file.py', 'fn')."""
    file_name, sep, entry = ref.partition(":")
    if not sep or not file_name or not entry:
        raise ValueError(f"{ref!r} must be 'file.py:function'")
    return file_name, entry
