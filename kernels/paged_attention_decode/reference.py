import math

import torch


def paged_attention_decode(q, k_cache, v_cache, block_table, seq_lens):
    """q [B, Hq, D]; k_cache, v_cache [NB, BS, Hkv, D]; block_table [B, MB] int32; seq_lens [B] int32
    -> out [B, Hq, D]: softmax(q k^T / sqrt(D)) v over each sequence's first seq_lens[b] cached tokens."""
    B, Hq, D = q.shape
    BS, Hkv = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    for b in range(B):
        n = int(seq_lens[b])
        blocks = block_table[b, : (n + BS - 1) // BS].long()
        k = k_cache[blocks].reshape(-1, Hkv, D)[:n].repeat_interleave(Hq // Hkv, dim=1)  # [n, Hq, D]
        v = v_cache[blocks].reshape(-1, Hkv, D)[:n].repeat_interleave(Hq // Hkv, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[b], k) / math.sqrt(D)  # [Hq, n]
        out[b] = torch.einsum("hn,nhd->hd", scores.softmax(dim=-1), v)
    return out


def _dequantized(cache, fmt: str):
    """The cache as kv_quant stores it (codes and per-(token, head) scales), decoded in float64."""
    from paged_inputs import load_sibling

    kv = load_sibling("kv_quant", "reference.py")
    NB, BS, Hkv, D = cache.shape
    codes, scale = getattr(kv, f"quantize_{fmt}")(cache.reshape(NB * BS, Hkv, D))
    return getattr(kv, f"dequantize_{fmt}")(codes, scale.double()).reshape(NB, BS, Hkv, D)


def attend_int8_cache(q, k_cache, v_cache, block_table, seq_lens):
    """paged_attention_decode over the int8-quantised cache (kv_quant.quantize_int8 of K and V)."""
    k, v = (_dequantized(c, "int8").to(q.dtype) for c in (k_cache, v_cache))
    return paged_attention_decode(q, k, v, block_table, seq_lens)


def attend_fp8_cache(q, k_cache, v_cache, block_table, seq_lens):
    """paged_attention_decode over the fp8 e4m3-quantised cache (kv_quant.quantize_fp8 of K and V)."""
    k, v = (_dequantized(c, "fp8").to(q.dtype) for c in (k_cache, v_cache))
    return paged_attention_decode(q, k, v, block_table, seq_lens)
