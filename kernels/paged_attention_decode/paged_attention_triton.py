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

A quantised cache (kv_quant's int8 or fp8 e4m3 codes, one FP32 scale per (token, head))
is read by the same kernel: each block's codes are decoded and scaled in registers, so
the cache is never dequantised in memory.
"""

import math

import torch
import triton
import triton.language as tl

# what k_ptr / v_ptr hold (the CACHE constexpr)
FLOAT_CACHE, INT8_CACHE, FP8_CACHE = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)


@triton.jit
def _e4m3_value(c):
    """FP32 value of float8_e4m3fn bit patterns c (int32, 0..255); NaN for 0x7F and 0xFF.

    kv_quant_triton.py decodes the same format the same way. This file keeps its own copy so
    that it stays self-contained: an agent's edited copy (check_numerics source=) runs from
    a job folder without its sibling kernels. attend_fp8_cache checks the two agree."""
    sign = (c & 0x80) << 24
    exp = (c >> 3) & 15
    man = c & 7
    normal = (sign | ((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
    sub = man.to(tl.float32) * 0.001953125  # 2^-9
    sub = tl.where(sign != 0, -sub, sub)
    value = tl.where(exp == 0, sub, normal)
    return tl.where((exp == 15) & (man == 7), float("nan"), value)


@triton.jit
def _load_cache_block(ptr, scale_ptr, block, offs_t, offs_d, kv_head, stride_b, stride_t, stride_h,
                      stride_sb, stride_st, stride_sh, mask_t, mask_d, CACHE: tl.constexpr):
    """One block's [BLOCK_T, BLOCK_D] keys or values as FP32 (decoded and scaled when quantised)."""
    mask = mask_t[:, None] & mask_d[None, :]
    x = tl.load(ptr + block * stride_b + offs_t[:, None] * stride_t + kv_head * stride_h + offs_d[None, :],
                mask=mask, other=0)
    if CACHE == FLOAT_CACHE:
        return x.to(tl.float32)
    scale = tl.load(scale_ptr + block * stride_sb + offs_t * stride_st + kv_head * stride_sh, mask=mask_t, other=0.0)
    if CACHE == INT8_CACHE:
        return x.to(tl.float32) * scale[:, None]
    return _e4m3_value(x.to(tl.int32)) * scale[:, None]


@triton.jit
def paged_attention_decode_kernel(
    q_ptr, k_ptr, v_ptr, block_table_ptr, seq_lens_ptr, out_ptr, k_scale_ptr, v_scale_ptr,
    stride_qb, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_tb, stride_ob, stride_oh,
    stride_sb, stride_st, stride_sh,  # of k_scale and v_scale [NB, BS, Hkv] (quantised caches only)
    scale, GROUP, BLOCK_SIZE, HEAD_DIM,
    BLOCK_G: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, CACHE: tl.constexpr,
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
        k = _load_cache_block(k_ptr, k_scale_ptr, block, offs_t, offs_d, kv_head, stride_kb, stride_kt, stride_kh,
                              stride_sb, stride_st, stride_sh, mask_t, mask_d, CACHE)  # [BLOCK_T, BLOCK_D]
        v = _load_cache_block(v_ptr, v_scale_ptr, block, offs_t, offs_d, kv_head, stride_vb, stride_vt, stride_vh,
                              stride_sb, stride_st, stride_sh, mask_t, mask_d, CACHE)
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
    return _launch(q, k_cache, v_cache, None, None, block_table, seq_lens, FLOAT_CACHE)


def paged_attention_decode_int8(q, k_codes, k_scale, v_codes, v_scale, block_table, seq_lens) -> torch.Tensor:
    """As paged_attention_decode over an int8 cache: k_codes, v_codes int8 [NB, BS, Hkv, D] with
    k_scale, v_scale float32 [NB, BS, Hkv] (kv_quant.quantize_int8 of the cache viewed as [NB*BS, Hkv, D])."""
    return _launch(q, k_codes, v_codes, k_scale, v_scale, block_table, seq_lens, INT8_CACHE)


def paged_attention_decode_fp8(q, k_codes, k_scale, v_codes, v_scale, block_table, seq_lens) -> torch.Tensor:
    """As paged_attention_decode over an fp8 e4m3 cache: uint8 codes holding float8_e4m3fn bits
    (kv_quant.quantize_fp8), scales float32 [NB, BS, Hkv]."""
    return _launch(q, k_codes, v_codes, k_scale, v_scale, block_table, seq_lens, FP8_CACHE)


def _launch(q, k_cache, v_cache, k_scale, v_scale, block_table, seq_lens, cache: tl.constexpr) -> torch.Tensor:
    B, Hq, D = q.shape
    NB, BS, Hkv, Dk = k_cache.shape
    assert v_cache.shape == k_cache.shape and Dk == D, "k_cache and v_cache are [NB, BS, Hkv, D] with q's D"
    assert Hq % Hkv == 0, "grouped-query attention: Hq must be a multiple of Hkv"
    assert block_table.shape[0] == B and seq_lens.shape == (B,), "block_table [B, MB] and seq_lens [B]"
    assert block_table.dtype == seq_lens.dtype == torch.int32, "block_table and seq_lens are int32"
    assert q.stride(2) == k_cache.stride(3) == v_cache.stride(3) == 1 and block_table.stride(1) == 1
    if cache == FLOAT_CACHE:
        k_scale = v_scale = k_cache  # never read: the pointers only fill the signature
    else:
        want = torch.int8 if cache == INT8_CACHE else torch.uint8
        assert k_cache.dtype == v_cache.dtype == want, f"quantised caches hold {want} codes"
        assert k_scale.shape == v_scale.shape == (NB, BS, Hkv) and k_scale.stride() == v_scale.stride(), \
            "k_scale and v_scale are float32 [NB, BS, Hkv] with the same strides"
        assert k_scale.dtype == v_scale.dtype == torch.float32, "scales are float32"
    strides_s = (k_scale.stride(0), k_scale.stride(1), k_scale.stride(2))
    out = torch.empty_like(q)
    group = Hq // Hkv
    paged_attention_decode_kernel[(B, Hkv)](
        q, k_cache, v_cache, block_table, seq_lens, out, k_scale, v_scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_table.stride(0), out.stride(0), out.stride(1), *strides_s,
        1.0 / math.sqrt(D), group, BS, D,
        BLOCK_G=max(16, triton.next_power_of_2(group)), BLOCK_T=max(16, triton.next_power_of_2(BS)),
        BLOCK_D=max(16, triton.next_power_of_2(D)), CACHE=cache.value,
    )
    return out


def attend_quantized_cache(q, k_cache, v_cache, block_table, seq_lens, fmt: str = "int8") -> torch.Tensor:
    """Quantise a float cache with kv_quant's kernels, then attend over the codes: the engine's path
    (quantise on write, attend fused), with the spec's own inputs. fmt: "int8" or "fp8".
    Needs the workspace's kv_quant folder next to this one."""
    from paged_inputs import load_sibling

    kv = load_sibling("kv_quant", "kv_quant_triton.py")
    NB, BS, Hkv, D = k_cache.shape
    quantize = kv.quantize_int8 if fmt == "int8" else kv.quantize_fp8
    k_codes, k_scale = quantize(k_cache.reshape(NB * BS, Hkv, D))
    v_codes, v_scale = quantize(v_cache.reshape(NB * BS, Hkv, D))
    fused = paged_attention_decode_int8 if fmt == "int8" else paged_attention_decode_fp8
    return fused(q, k_codes.view(NB, BS, Hkv, D), k_scale.view(NB, BS, Hkv), v_codes.view(NB, BS, Hkv, D),
                 v_scale.view(NB, BS, Hkv), block_table, seq_lens)


def attend_int8_cache(q, k_cache, v_cache, block_table, seq_lens) -> torch.Tensor:
    return attend_quantized_cache(q, k_cache, v_cache, block_table, seq_lens, "int8")


def attend_fp8_cache(q, k_cache, v_cache, block_table, seq_lens) -> torch.Tensor:
    return attend_quantized_cache(q, k_cache, v_cache, block_table, seq_lens, "fp8")
