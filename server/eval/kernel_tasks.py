"""Kernel task families: a small Triton kernel with two implementations, one of which may
carry a planted bug, written as a workspace of its own (kernels/<name>/). Every kernel runs
cheaply under the Triton interpreter on a CPU host.

    stride        the bug assumes packed rows (check_numerics' padded_rows layout fails it)
    tail_mask     the grid skips the last partial block (unwritten output at N % BLOCK != 0)
    accumulation  the dot product accumulates in the input dtype (fp16 fails, fp32 passes)
    unlaunchable  the launcher asks for num_warps the target cannot run (compile_kernel's note)
    nondeterminism  split-K partials combined in a random order (differs bitwise call to call)
    control_*     the same kernels with both implementations right: nothing is wrong

A seed draws the kernel's name, the implementations' names, which one is buggy, and the
sizes (head dims, block sizes, reduction lengths, num_warps).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .tasks import Cause, Location, Truth

TARGET = "sm_90a"
IMPL_NAMES = (("triton", "triton_v2"), ("baseline", "tuned"), ("v1", "v2"), ("ref_tiles", "fast"))


def _question(params: dict) -> str:
    impls = ", ".join(params["impls"])
    return (
        f"Before we ship the kernel {params['kernel']} to our H100 fleet (target {TARGET}), check "
        f"it: is anything wrong with any of its implementations ({impls})? If something is, "
        "say which implementation and what the cause is; if nothing is, say so."
    )


@dataclass(frozen=True)
class KernelFiles:
    """One kernel's workspace: spec, reference and impl templates, and how a variant fills
    their placeholders. `per_impl(params)` gives each per-impl placeholder stem its value in
    the buggy impl and in a right one ('PACKED' fills @PACKED_A@ and @PACKED_B@); `shared`
    fills the rest (a value may itself hold a placeholder filled after it, e.g. @BLOCK@).
    `impl_file` names the impls' file ({kernel}: the kernel's name)."""

    spec: str
    reference: str
    impl: str
    per_impl: Callable[[dict], dict[str, tuple[str, str]]] = lambda params: {}
    shared: Callable[[dict], dict[str, str]] = lambda params: {}
    impl_file: str = "{kernel}_triton.py"

    def write(self, params: dict, folder: Path, buggy: str | None) -> None:
        a, b = params["impls"]
        subs = {
            "@KERNEL@": params["kernel"],
            "@IMPL_A@": a,
            "@IMPL_B@": b,
            "@SHAPES@": ", ".join(repr(s) for s in params["shapes"]) + ",",
        }
        for stem, (bad, right) in self.per_impl(params).items():
            subs[f"@{stem}_A@"] = bad if buggy == a else right
            subs[f"@{stem}_B@"] = bad if buggy == b else right
        subs.update(self.shared(params))
        files = {
            "spec.py": self.spec,
            "reference.py": self.reference,
            self.impl_file.format(kernel=params["kernel"]): self.impl,
        }
        for name, template in files.items():
            text = template
            for key, value in subs.items():
                text = text.replace(key, value)
            (folder / name).write_text(text.lstrip())


# ---- stride: q and k are slices of one fused qkv in production ----------------------------------

STRIDE_SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="@KERNEL@",
    description="q_out = q * cos[t], k_out = k * cos[t] (a RoPE-like scale of q and k)",
    reference="reference.py:@KERNEL@",
    impls={"@IMPL_A@": "@KERNEL@_triton.py:scale_a", "@IMPL_B@": "@KERNEL@_triton.py:scale_b"},
    args=(Arg("q", ("T", "Hq", "D")), Arg("k", ("T", "Hk", "D")), Arg("cos", ("T", "D"))),
    shapes={"cpu": (@SHAPES@), "gpu": ({"T": 4096, "Hq": 32, "Hk": 8, "D": 128},)},
    dtypes=("float32",),
    flops=lambda s: s["T"] * (s["Hq"] + s["Hk"]) * s["D"],
    bytes=lambda s, itemsize: (2 * s["T"] * (s["Hq"] + s["Hk"]) * s["D"] + s["T"] * s["D"]) * itemsize,
    tolerances={"float32": Tolerance(rel_l2=1e-6, why="one fp32 rounding per element")},
)
"""

STRIDE_REFERENCE = """
def @KERNEL@(q, k, cos):
    return q * cos[:, None, :], k * cos[:, None, :]
"""

STRIDE_IMPL = """
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, c_ptr, out_ptr, stride_xt, stride_xh, stride_ct, H, D,
                 BLOCK_D: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    mask = d < D
    x = tl.load(x_ptr + t * stride_xt + h * stride_xh + d, mask=mask)
    c = tl.load(c_ptr + t * stride_ct + d, mask=mask)
    tl.store(out_ptr + (t * H + h) * D + d, x * c, mask=mask)


def _scale(x, cos, packed):  # x [T, H, D], cos [T, D]
    T, H, D = x.shape
    assert x.stride(2) == 1 and cos.stride(1) == 1, "the last dimension must be contiguous"
    out = torch.empty((T, H, D), dtype=x.dtype, device=x.device)
    stride_t = H * D if packed else x.stride(0)
    stride_h = D if packed else x.stride(1)
    scale_kernel[(T, H)](x, cos, out, stride_t, stride_h, cos.stride(0), H, D,
                         BLOCK_D=triton.next_power_of_2(D))
    return out


def scale_a(q, k, cos):
    return _scale(q, cos, @PACKED_A@), _scale(k, cos, @PACKED_A@)


def scale_b(q, k, cos):
    return _scale(q, cos, @PACKED_B@), _scale(k, cos, @PACKED_B@)
"""


def _stride_params(rng: random.Random) -> dict:
    d = rng.choice((16, 32))
    hq, hk = rng.choice(((2, 1), (4, 1), (4, 2)))
    return {
        "kernel": rng.choice(("rope_scale", "qk_scale", "fused_scale", "rotary_mul")),
        "shapes": [{"T": 4, "Hq": hq, "Hk": hk, "D": d}, {"T": 6, "Hq": hq * 2, "Hk": hk, "D": d}],
    }


STRIDE = KernelFiles(
    STRIDE_SPEC,
    STRIDE_REFERENCE,
    STRIDE_IMPL,
    per_impl=lambda p: {"PACKED": ("True", "False")},
)


# ---- tail mask: an elementwise op whose grid floors N / BLOCK -----------------------------------

ELEMENTWISE_SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="@KERNEL@",
    description="out = x @OP@ y, elementwise over a 1-D vector",
    reference="reference.py:@KERNEL@",
    impls={"@IMPL_A@": "@KERNEL@_triton.py:op_a", "@IMPL_B@": "@KERNEL@_triton.py:op_b"},
    args=(Arg("x", ("N",)), Arg("y", ("N",))),
    shapes={"cpu": (@SHAPES@), "gpu": ({"N": 1 << 24},)},
    dtypes=("float32",),
    flops=lambda s: s["N"],
    bytes=lambda s, itemsize: 3 * s["N"] * itemsize,
    tolerances={"float32": Tolerance(rel_l2=1e-6, why="one fp32 rounding per element")},
)
"""

ELEMENTWISE_REFERENCE = """
def @KERNEL@(x, y):
    return x @OP@ y
"""

ELEMENTWISE_IMPL = """
import torch
import triton
import triton.language as tl


@triton.jit
def op_kernel(x_ptr, y_ptr, out_ptr, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x @OP@ y, mask=mask)


def _launch(x, y, num_blocks, num_warps):  # x, y [N]
    assert x.shape == y.shape and x.is_contiguous() and y.is_contiguous()
    out = torch.empty_like(x)
    op_kernel[(num_blocks,)](x, y, out, x.numel(), BLOCK=@BLOCK@, num_warps=num_warps)
    return out


def op_a(x, y):
    return _launch(x, y, @GRID_A@, num_warps=@WARPS_A@)


def op_b(x, y):
    return _launch(x, y, @GRID_B@, num_warps=@WARPS_B@)
"""

CDIV_GRID = "triton.cdiv(x.numel(), @BLOCK@)"
FLOOR_GRID = "x.numel() // @BLOCK@"


def _elementwise_params(rng: random.Random) -> dict:
    block = rng.choice((128, 256, 512))
    return {
        "kernel": rng.choice(("scale_add", "residual_add", "gate_mul", "bias_mul")),
        "op": rng.choice(("+", "*")),
        "block": block,
        "shapes": [{"N": 4 * block}, {"N": 4 * block - rng.randrange(1, block)}],
        "num_warps": 4,
        "bad_num_warps": rng.choice((64, 128)),
    }


def _elementwise(bug: str | None) -> KernelFiles:
    """The elementwise kernel with `bug` ('grid': the floored grid; 'warps': the num_warps the
    target cannot launch) in the buggy impl; None: both right."""

    def per_impl(p: dict) -> dict[str, tuple[str, str]]:
        warps = str(p["num_warps"])
        return {
            "GRID": (FLOOR_GRID if bug == "grid" else CDIV_GRID, CDIV_GRID),
            "WARPS": (str(p["bad_num_warps"]) if bug == "warps" else warps, warps),
        }

    return KernelFiles(
        ELEMENTWISE_SPEC,
        ELEMENTWISE_REFERENCE,
        ELEMENTWISE_IMPL,
        per_impl=per_impl,
        shared=lambda p: {"@OP@": p["op"], "@BLOCK@": str(p["block"])},
    )


# ---- accumulation: a row dot product whose accumulator may take the input dtype ---------------

DOT_SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="@KERNEL@",
    description="out[m] = sum_k x[m, k] * w[k]: a matrix-vector product, one row per program",
    reference="reference.py:@KERNEL@",
    impls={"@IMPL_A@": "@KERNEL@_triton.py:dot_a", "@IMPL_B@": "@KERNEL@_triton.py:dot_b"},
    args=(Arg("x", ("M", "K")), Arg("w", ("K",))),
    shapes={"cpu": (@SHAPES@), "gpu": ({"M": 8192, "K": 8192},)},
    dtypes=("float32", "float16"),
    flops=lambda s: 2 * s["M"] * s["K"],
    bytes=lambda s, itemsize: (s["M"] * s["K"] + s["K"] + s["M"]) * itemsize,
    tolerances={
        "float32": Tolerance(rel_l2=1e-5, why="fp32 sum of K products, error ~sqrt(K)*2^-24"),
        "float16": Tolerance(rel_l2=8e-4, why="fp32 accumulation, one fp16 rounding of out: "
                             "2^-11 / sqrt(3) ~ 2.8e-4 rel L2, with margin"),
    },
)
"""

DOT_REFERENCE = """
def @KERNEL@(x, w):
    return x @ w
"""

DOT_IMPL = """
import torch
import triton
import triton.language as tl


@triton.jit
def dot_kernel(x_ptr, w_ptr, out_ptr, M, K, stride_xm, BLOCK_M: tl.constexpr,
               BLOCK_K: tl.constexpr, ACC_FP32: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < M
    if ACC_FP32:
        acc = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_K], dtype=x_ptr.dtype.element_ty)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        mask = row_mask[:, None] & (k < K)[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :], mask=mask, other=0.0)
        w = tl.load(w_ptr + k, mask=k < K, other=0.0)
        if ACC_FP32:
            acc += x.to(tl.float32) * w.to(tl.float32)[None, :]
        else:
            acc += x * w[None, :]
    tl.store(out_ptr + rows, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=row_mask)


def _dot(x, w, acc_fp32):  # x [M, K], w [K] -> [M]
    M, K = x.shape
    assert x.stride(1) == 1 and w.stride(0) == 1
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    BLOCK_M = 64
    dot_kernel[(triton.cdiv(M, BLOCK_M),)](x, w, out, M, K, x.stride(0), BLOCK_M=BLOCK_M,
                                          BLOCK_K=@BLOCK_K@, ACC_FP32=acc_fp32)
    return out


def dot_a(x, w):
    return _dot(x, w, @ACC_A@)


def dot_b(x, w):
    return _dot(x, w, @ACC_B@)
"""


def _dot_params(rng: random.Random) -> dict:
    return {
        "kernel": rng.choice(("row_dot", "gemv", "logit_proj", "score_dot")),
        "block_k": 4,  # a sequential add per 4 elements: 256-384 of them per lane at the large K
        "shapes": [{"M": 64, "K": 32}, {"M": 64, "K": rng.choice((1024, 1536))}],
    }


DOT = KernelFiles(
    DOT_SPEC,
    DOT_REFERENCE,
    DOT_IMPL,
    per_impl=lambda p: {"ACC": ("0", "1")},
    shared=lambda p: {"@BLOCK_K@": str(p["block_k"])},
)


# ---- nondeterminism: split-K partial sums added in an order that changes per call -------------

SPLIT_SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="@KERNEL@",
    description="out[m] = sum_n x[m, n]: a row sum split into @SPLITS@ chunks (split-K), the "
    "chunks' partial sums combined after",
    reference="reference.py:@KERNEL@",
    impls={"@IMPL_A@": "@KERNEL@_triton.py:sum_a", "@IMPL_B@": "@KERNEL@_triton.py:sum_b"},
    args=(Arg("x", ("M", "N")),),
    shapes={"cpu": (@SHAPES@), "gpu": ({"M": 8192, "N": 8192},)},
    dtypes=("float32",),
    flops=lambda s: s["M"] * s["N"],
    bytes=lambda s, itemsize: (s["M"] * s["N"] + s["M"]) * itemsize,
    tolerances={"float32": Tolerance(rel_l2=1e-5, why="fp32 sum of N terms, error ~sqrt(N)*2^-24")},
)
"""

SPLIT_REFERENCE = """
def @KERNEL@(x):
    return x.sum(dim=1)
"""

SPLIT_IMPL = """
import random

import torch
import triton
import triton.language as tl


@triton.jit
def partial_kernel(x_ptr, part_ptr, M, N, stride_xm, CHUNK: tl.constexpr, SPLITS: tl.constexpr):
    m = tl.program_id(0)
    s = tl.program_id(1)
    n = s * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + m * stride_xm + n, mask=n < N, other=0.0)
    tl.store(part_ptr + m * SPLITS + s, tl.sum(x.to(tl.float32), axis=0))


@triton.jit
def combine_kernel(part_ptr, order_ptr, out_ptr, M, SPLITS: tl.constexpr, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = rows < M
    acc = tl.zeros([BLOCK_M], dtype=tl.float32)
    for i in range(SPLITS):
        s = tl.load(order_ptr + i)
        acc += tl.load(part_ptr + rows * SPLITS + s, mask=mask, other=0.0)
    tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _sum(x, fixed_order):  # x [M, N] -> [M]
    M, N = x.shape
    assert x.stride(1) == 1
    SPLITS = @SPLITS@
    chunk = triton.next_power_of_2(triton.cdiv(N, SPLITS))
    part = torch.empty((M, SPLITS), dtype=torch.float32, device=x.device)
    partial_kernel[(M, SPLITS)](x, part, M, N, x.stride(0), CHUNK=chunk, SPLITS=SPLITS)
    # the combine: in split order, or in the order the splits happen to finish (as atomics do)
    order = list(range(SPLITS))
    if not fixed_order:
        random.SystemRandom().shuffle(order)
    order = torch.tensor(order, dtype=torch.int32, device=x.device)
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    combine_kernel[(triton.cdiv(M, 16),)](part, order, out, M, SPLITS=SPLITS, BLOCK_M=16)
    return out


def sum_a(x):
    return _sum(x, @FIXED_A@)


def sum_b(x):
    return _sum(x, @FIXED_B@)
"""


def _split_params(rng: random.Random) -> dict:
    return {
        "kernel": rng.choice(("row_sum", "splitk_sum", "token_sum", "reduce_rows")),
        "splits": rng.choice((8, 16)),
        "shapes": [{"M": 16, "N": 1024}, {"M": 32, "N": 2048}],
    }


SPLIT = KernelFiles(
    SPLIT_SPEC,
    SPLIT_REFERENCE,
    SPLIT_IMPL,
    per_impl=lambda p: {"FIXED": ("False", "True")},
    shared=lambda p: {"@SPLITS@": str(p["splits"])},
)


# ---- the families -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelFamily:
    """One kind of task: `draw` picks a variant and its truth, `build` writes its workspace."""

    cause: Cause
    variant: Callable[[random.Random], dict]
    files: KernelFiles
    number: Callable[[dict], float | None] = lambda params: None
    number_meaning: str | None = None
    config_key: str | None = None

    def draw(self, rng: random.Random) -> tuple[dict, Truth]:
        params = self.variant(rng)
        params["impls"] = list(rng.choice(IMPL_NAMES))
        buggy = None if self.cause == Cause.none else rng.choice(params["impls"])
        params["buggy_impl"] = buggy
        truth = Truth(
            cause=self.cause,
            location=Location(kernel=params["kernel"], impl=buggy, config_key=self.config_key),
            number=self.number(params),
            number_meaning=self.number_meaning,
        )
        return params, truth

    def question(self, params: dict) -> str:
        return _question(params)

    def build(self, params: dict, root: Path) -> Path:
        folder = root / "kernels" / params["kernel"]
        folder.mkdir(parents=True)
        self.files.write(params, folder, params["buggy_impl"])
        return root


FAMILIES: dict[str, KernelFamily] = {
    "stride": KernelFamily(Cause.stride_assumption, _stride_params, STRIDE),
    "tail_mask": KernelFamily(
        Cause.tail_mask,
        _elementwise_params,
        _elementwise("grid"),
        number=lambda p: float(p["block"]),
        number_meaning="the block size (elements per program) the tail is lost at",
    ),
    "accumulation": KernelFamily(Cause.accumulation_precision, _dot_params, DOT),
    "unlaunchable": KernelFamily(
        Cause.unlaunchable_config,
        _elementwise_params,
        _elementwise("warps"),
        number=lambda p: float(p["bad_num_warps"]),
        number_meaning="the num_warps the launcher asks for",
        config_key="num_warps",
    ),
    "nondeterminism": KernelFamily(Cause.nondeterminism, _split_params, SPLIT),
    "control_stride": KernelFamily(Cause.none, _stride_params, STRIDE),
    "control_elementwise": KernelFamily(Cause.none, _elementwise_params, _elementwise(None)),
    "control_accumulation": KernelFamily(Cause.none, _dot_params, DOT),
}
