"""Layouts across the boundary (sandbox/worker/tensors.py, layouts.py), checked against
torch's own view of the tensors: strides, offsets and storage pointers."""

import torch

from infra_agent.sandbox.worker.layouts import relayout
from infra_agent.sandbox.worker.tensors import (
    clone_shared,
    copy_shared,
    load_tensors,
    save_tensors,
)


def _fused(T=4, H=2, D=8):
    qkv = torch.randn(T, 3 * H * D)
    return qkv, qkv[:, : H * D].view(T, H, D), qkv[:, H * D : 2 * H * D].view(T, H, D)


def _ptr(t):
    return t.untyped_storage().data_ptr()


def test_views_of_one_storage_come_back_as_views_of_one_storage(tmp_path):
    qkv, q, k = _fused()
    save_tensors(tmp_path / "x.pt", {"0": q, "1": k})
    back = load_tensors(tmp_path / "x.pt")
    assert back["0"].stride() == q.stride() == (48, 8, 1) and back["1"].storage_offset() == 16
    assert _ptr(back["0"]) == _ptr(back["1"]) and back["0"].untyped_storage().nbytes() == 4 * 4 * 48
    assert torch.equal(back["0"], q) and torch.equal(back["1"], k)


def test_clones_and_refills_keep_the_layout_and_the_pointers():
    _, q, k = _fused()
    buffers = clone_shared([q, k])
    assert [b.stride() for b in buffers] == [q.stride(), k.stride()]
    assert _ptr(buffers[0]) == _ptr(buffers[1]) != _ptr(q)
    pointers = [b.data_ptr() for b in buffers]
    _, q2, k2 = _fused()
    copy_shared(buffers, [q2, k2])
    assert [b.data_ptr() for b in buffers] == pointers
    assert torch.equal(buffers[0], q2) and torch.equal(buffers[1], k2)


def test_padded_rows_keep_values_and_the_last_dimension_contiguous():
    x = torch.randn(3, 2, 8)
    p = relayout(x, "padded_rows")
    assert torch.equal(p, x) and p.stride() == (16 + 16, 8, 1) and p.storage_offset() == 16
    whole = torch.empty(0).set_(p.untyped_storage())
    assert int(whole.isnan().sum()) == whole.numel() - x.numel()  # the padding is NaN
    t = relayout(torch.arange(12.0).view(3, 4), "transposed")
    assert t.stride() == (1, 3) and torch.equal(t, torch.arange(12.0).view(3, 4))
    s = relayout(torch.arange(5, dtype=torch.int32), "strided_last_dim")
    assert s.stride() == (2,) and s.tolist() == [0, 1, 2, 3, 4]
