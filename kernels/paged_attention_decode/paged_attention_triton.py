"""Decode attention over a paged KV cache: one new query token per sequence attends to
its cached keys and values, which live in fixed-size blocks scattered over a pool.

One program per (sequence, KV head). It walks the sequence's row of the block table,
loads one block of K and V per step, and keeps an online softmax (running max, running
sum, rescaled accumulator) in FP32, so a context of any length needs one pass and no
[Hq, L] score matrix. Grouped-query attention: the Hq / Hkv query heads that share a
KV head are handled by the same program as the rows of one tile, so each K/V block is
read once per KV head, not once per query head.

Tiles are padded to at least 16 (tl.dot's minimum) and masked: the query group (rows),
the block's tokens and the head dimension. Operands are FP32 with IEEE products: exact
under the Triton interpreter and on every GPU (tensor-core bf16 operands are the
obvious next optimisation; see README).
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def paged_attention_decode_kernel(
    q_ptr, k_ptr, v_ptr, block_table_ptr, seq_lens_ptr, out_ptr,
    stride_qb, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_tb, stride_ob, stride_oh,
    scale, GROUP, BLOCK_SIZE, HEAD_DIM,
    BLOCK_G: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    offs_g = tl.arange(0, BLOCK_G)  # query heads of this KV head's group
    offs_t = tl.arange(0, BLOCK_T)  # token slots of one cache block
    offs_d = tl.arange(0, BLOCK_D)
    mask_g = offs_g < GROUP
    mask_d = offs_d < HEAD_DIM
    q_heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + seq * stride_qb + q_heads[:, None] * stride_qh + offs_d[None, :],
                mask=mask_g[:, None] & mask_d[None, :], other=0.0).to(tl.float32)  # [BLOCK_G, BLOCK_D]
    q = q * scale

    seq_len = tl.load(seq_lens_ptr + seq)
    m_i = tl.full((BLOCK_G,), float("-inf"), dtype=tl.float32)  # running max of the scores
    l_i = tl.zeros((BLOCK_G,), dtype=tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros((BLOCK_G, BLOCK_D), dtype=tl.float32)
    num_blocks = tl.cdiv(seq_len, BLOCK_SIZE)
    for j in range(0, num_blocks):
        block = tl.load(block_table_ptr + seq * stride_tb + j).to(tl.int64)  # int64: pools beyond 2^31 elements
        pos = j * BLOCK_SIZE + offs_t
        mask_t = (offs_t < BLOCK_SIZE) & (pos < seq_len)
        kv_mask = mask_t[:, None] & mask_d[None, :]
        k = tl.load(k_ptr + block * stride_kb + offs_t[:, None] * stride_kt + kv_head * stride_kh + offs_d[None, :],
                    mask=kv_mask, other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_D]
        v = tl.load(v_ptr + block * stride_vb + offs_t[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :],
                    mask=kv_mask, other=0.0).to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision="ieee")  # [BLOCK_G, BLOCK_T]
        scores = tl.where(mask_t[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))  # finite: every block has a valid token
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(out_ptr + seq * stride_ob + q_heads[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_g[:, None] & mask_d[None, :])


def paged_attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """q [B, Hq, D]; k_cache, v_cache [NB, BS, Hkv, D]; block_table [B, MB] int32; seq_lens [B] int32
    (each >= 1) -> out [B, Hq, D] in q's dtype, scale 1/sqrt(D). Never reads tensor values on the host."""
    B, Hq, D = q.shape
    NB, BS, Hkv, Dk = k_cache.shape
    assert v_cache.shape == k_cache.shape and Dk == D, "k_cache and v_cache are [NB, BS, Hkv, D] with q's D"
    assert Hq % Hkv == 0, "grouped-query attention: Hq must be a multiple of Hkv"
    assert block_table.shape[0] == B and seq_lens.shape == (B,), "block_table [B, MB] and seq_lens [B]"
    assert block_table.dtype == seq_lens.dtype == torch.int32, "block_table and seq_lens are int32"
    assert q.stride(2) == k_cache.stride(3) == v_cache.stride(3) == 1 and block_table.stride(1) == 1
    out = torch.empty_like(q)
    group = Hq // Hkv
    paged_attention_decode_kernel[(B, Hkv)](
        q, k_cache, v_cache, block_table, seq_lens, out,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_table.stride(0), out.stride(0), out.stride(1),
        1.0 / math.sqrt(D), group, BS, D,
        BLOCK_G=max(16, triton.next_power_of_2(group)), BLOCK_T=max(16, triton.next_power_of_2(BS)),
        BLOCK_D=max(16, triton.next_power_of_2(D)),
    )
    return out
