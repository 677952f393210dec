"""A strided-input kernel of the tests' own, written as a serving engine calls it: q and k
are slices of one fused qkv projection output, so their rows are not contiguous (row
stride (Hq + 2 * Hk) * D). `good` reads the strides it is given; `stride_bug` assumes a
packed row stride of H * D (the same kernel with ASSUME_PACKED=1).

`make_workspace(root)` writes it as kernels/fused_scale/ in a workspace of its own, and
`load(root)` imports its spec, reference and impls in the test's process (the Triton
interpreter on), for a plain-Python witness on the same inputs.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path

SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="fused_scale",
    description="q_out = q * cos[t], k_out = k * cos[t] (a RoPE-like scale); q and k are slices "
    "of one fused qkv",
    reference="reference.py:fused_scale",
    impls={"good": "fused_scale_triton.py:fused_scale",
           "stride_bug": "fused_scale_triton.py:fused_scale_stride_bug"},
    args=(Arg("q", ("T", "Hq", "D")), Arg("k", ("T", "Hk", "D")), Arg("cos", ("T", "D"))),
    shapes={"cpu": ({"T": 4, "Hq": 2, "Hk": 1, "D": 16}, {"T": 6, "Hq": 4, "Hk": 2, "D": 16}),
            "gpu": ({"T": 64, "Hq": 8, "Hk": 2, "D": 64},)},
    dtypes=("float32",),
    flops=lambda s: s["T"] * (s["Hq"] + s["Hk"]) * s["D"],
    bytes=lambda s, itemsize: (2 * s["T"] * (s["Hq"] + s["Hk"]) * s["D"] + s["T"] * s["D"]) * itemsize,
    tolerances={"float32": Tolerance(rel_l2=1e-6, why="one fp32 rounding per element")},
    make_inputs="inputs.py:make_inputs",
)
"""

INPUTS = """
import torch

def make_inputs(shape, dtype, gen):
    T, Hq, Hk, D = shape["T"], shape["Hq"], shape["Hk"], shape["D"]
    qkv = torch.randn(T, (Hq + 2 * Hk) * D, generator=gen, dtype=torch.float64).to(dtype)
    q = qkv[:, : Hq * D].view(T, Hq, D)
    k = qkv[:, Hq * D : (Hq + Hk) * D].view(T, Hk, D)
    cos = torch.randn(T, D, generator=gen, dtype=torch.float64).to(dtype)
    return [q, k, cos]
"""

REFERENCE = """
def fused_scale(q, k, cos):
    return q * cos[:, None, :], k * cos[:, None, :]
"""

IMPL = """
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


def _scale(x, cos, packed):
    T, H, D = x.shape
    assert x.stride(2) == 1 and cos.stride(1) == 1, "the last dimension must be contiguous"
    out = torch.empty((T, H, D), dtype=x.dtype, device=x.device)
    stride_t = H * D if packed else x.stride(0)  # the bug: a packed row assumed
    stride_h = D if packed else x.stride(1)
    scale_kernel[(T, H)](x, cos, out, stride_t, stride_h, cos.stride(0), H, D,
                         BLOCK_D=triton.next_power_of_2(D))
    return out


def fused_scale(q, k, cos, ASSUME_PACKED=0):
    return _scale(q, cos, ASSUME_PACKED), _scale(k, cos, ASSUME_PACKED)


def fused_scale_stride_bug(q, k, cos):
    return fused_scale(q, k, cos, ASSUME_PACKED=1)
"""

# What a caller writes to time it on the layout as made: it refuses any other layout, so
# a timing that ran means the candidate got q and k as slices of one qkv.
NEEDS_FUSED = (
    IMPL
    + """

def fused_scale_needs_fused(q, k, cos):
    T, Hq, D = q.shape
    Hk = k.shape[1]
    row = (Hq + 2 * Hk) * D
    same = q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()
    assert q.stride() == (row, D, 1) and k.stride() == (row, D, 1) and same, (
        f"not the fused layout: q {q.stride()} offset {q.storage_offset()}, "
        f"k {k.stride()} offset {k.storage_offset()}, one storage: {same}"
    )
    assert k.storage_offset() - q.storage_offset() == Hq * D
    return fused_scale(q, k, cos)
"""
)

FILES = {
    "spec.py": SPEC,
    "inputs.py": INPUTS,
    "reference.py": REFERENCE,
    "fused_scale_triton.py": NEEDS_FUSED,
}

SHAPE = {"T": 4, "Hq": 2, "Hk": 1, "D": 16}


def make_workspace(root: Path) -> Path:
    folder = root / "kernels" / "fused_scale"
    folder.mkdir(parents=True)
    for name, text in FILES.items():
        (folder / name).write_text(text.lstrip())
    return root


def load(root: Path, name: str):
    """A module of the kernel's folder, imported here (Triton interpreted, as on CPU)."""
    os.environ["TRITON_INTERPRET"] = "1"
    path = root / "kernels" / "fused_scale" / name
    spec = importlib.util.spec_from_file_location(f"witness_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def witness_rel_l2(
    root: Path,
    impl: str,
    shape: dict,
    seed: int,
    contiguous: bool = False,
    padded: tuple[int, ...] = (),
):
    """The worst output's rel L2 of `impl` against the float64 reference on the inputs make_inputs makes from
    `seed` (made contiguous with `contiguous`; then the arguments at the indices `padded` put in
    padded rows by hand: a view into a NaN-filled buffer, row stride + 16, offset 16): plain
    Python, no harness."""
    import torch

    inputs = load(root, "inputs.py").make_inputs(
        shape, torch.float32, torch.Generator().manual_seed(seed)
    )
    if contiguous:
        inputs = [t.contiguous() for t in inputs]
    for j in padded:
        inputs[j] = _padded_rows(inputs[j])
    fn = getattr(load(root, "fused_scale_triton.py"), impl)
    outs = fn(*inputs)
    refs = load(root, "reference.py").fused_scale(*[t.double() for t in inputs])
    # each output's rel L2, the worst one (as a case's trial_rel_l2 reports it); NaN (an
    # output read from the NaN padding) is the worst of all, wherever it stands
    rels = [
        float((o.double() - r).pow(2).sum().sqrt() / r.pow(2).sum().sqrt())
        for o, r in zip(outs, refs)
    ]
    return float("nan") if any(math.isnan(x) for x in rels) else max(rels)


def _padded_rows(t, pad: int = 16):
    """`t`'s values in a view whose dimension 0 has `pad` more elements of stride and whose
    storage starts `pad` elements in, the gaps NaN (torch.as_strided over a fresh buffer)."""
    import torch

    rest = t[0].numel()
    buf = torch.full((pad + t.shape[0] * (rest + pad),), float("nan"), dtype=t.dtype)
    view = buf[pad:].view(t.shape[0], rest + pad)[:, :rest].view(t.shape)
    view.copy_(t)
    return view
