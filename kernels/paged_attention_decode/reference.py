import torch
import torch.nn.functional as F


def paged_attention_decode(q, k_cache, v_cache, block_table, seq_lens):
    """q [B, Hq, D]; k_cache, v_cache [NB, BS, Hkv, D]; block_table [B, MB] int32; seq_lens [B] int32
    -> out [B, Hq, D]: softmax(q k^T / sqrt(D)) v over each sequence's first seq_lens[b] cached tokens.

    All sequences at once (the serving engine runs this on CPU in every decode step: a Python loop
    over sequences cost ~0.2 ms per sequence per layer): each sequence's blocks gathered in table
    order, padded to the table's width, and the positions past seq_lens[b] masked out of the
    softmax. Table entries past a sequence's last block may hold any value (clamped, then masked)."""
    B, Hq, D = q.shape
    NB, BS, Hkv = k_cache.shape[:3]
    L = block_table.shape[1] * BS  # the padded context
    blocks = block_table.reshape(-1).long().clamp(0, NB - 1)
    k = k_cache.index_select(0, blocks).view(B, L, Hkv, D).transpose(1, 2)  # [B, Hkv, L, D]
    v = v_cache.index_select(0, blocks).view(B, L, Hkv, D).transpose(1, 2)
    in_context = torch.arange(L, device=q.device)[None, :] < seq_lens.to(q.device).long()[:, None]  # [B, L]
    # grouped-query heads: the Hq // Hkv query heads of each KV head attend to it together
    out = F.scaled_dot_product_attention(q.reshape(B, Hkv, Hq // Hkv, D), k, v, attn_mask=in_context[:, None, None])
    return out.reshape(B, Hq, D)


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
