"""Input layouts a kernel is tried on besides the one the spec makes (PyTorch OpInfo's
non-contiguous samples, in a serving stack's terms).

A layout changes where an input's elements live, never their values, so the reference's
outputs are the same as for the input as made:

- ``as_made``: what the spec's arguments or ``make_inputs`` produce, untouched.
- ``padded_rows``: a view into a larger buffer, dimension 0's stride padded by
  PAD_ELEMENTS and a storage offset of PAD_ELEMENTS, the other dimensions packed and the
  last one contiguous: a slice of a fused projection (q from qkv), a padded KV cache.
- ``strided_last_dim``: every element two apart (the last dimension has stride 2).
- ``transposed``: the last two dimensions swapped in memory (column-major), as
  ``x.t()`` passes them; a 1-D tensor gets ``strided_last_dim``.

The padding (and the gaps) hold NaN for float tensors, so a kernel that reads them
computes NaN where the reference is finite; integer tensors get 0 there (a safe index).
Stdlib + torch: both the reference job and the parent's planning name these.
"""

from __future__ import annotations

AS_MADE = "as_made"
PADDED_ROWS = "padded_rows"
STRIDED_LAST_DIM = "strided_last_dim"
TRANSPOSED = "transposed"
LAYOUTS = (AS_MADE, PADDED_ROWS, STRIDED_LAST_DIM, TRANSPOSED)

# What an argument's kernel accepts (kernels/schema.py Arg.layout) -> layouts tried on it.
ACCEPTS = {
    "contiguous": (AS_MADE,),
    "last_dim_contiguous": (AS_MADE, PADDED_ROWS),
    "any": LAYOUTS,
}

PAD_ELEMENTS = 16  # a multiple of 16 bytes for every dtype: rows stay 16-byte aligned


def relayout(t, layout: str):
    """`t`'s values in `layout` (a view into a fresh buffer); `t` itself for as_made and
    for tensors with no elements or no dimensions."""
    import torch

    if layout == AS_MADE or t.ndim == 0 or t.numel() == 0:
        return t
    shape = list(t.shape)
    strides, offset = _strides(shape, layout), PAD_ELEMENTS
    reach = sum((n - 1) * s for n, s in zip(shape, strides)) + 1
    fill = float("nan") if t.is_floating_point() or t.is_complex() else 0
    buf = torch.full((offset + reach + PAD_ELEMENTS,), fill, dtype=t.dtype, device=t.device)
    view = buf.as_strided(shape, strides, offset)
    view.copy_(t)
    return view


def _strides(shape: list[int], layout: str) -> list[int]:
    order = list(range(len(shape)))  # dims from outermost to innermost in memory
    if layout == TRANSPOSED and len(shape) >= 2:
        order[-2], order[-1] = order[-1], order[-2]
    step = 2 if layout == STRIDED_LAST_DIM or (layout == TRANSPOSED and len(shape) < 2) else 1
    strides = [0] * len(shape)
    for d in reversed(order):
        strides[d] = step
        step *= max(shape[d], 1)
    if layout == PADDED_ROWS and len(shape) >= 2:
        strides[0] += PAD_ELEMENTS
    return strides
