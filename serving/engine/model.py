"""A Llama-style decoder over a paged KV cache: RMSNorm, RoPE, grouped-query attention,
SwiGLU MLP, tied or untied LM head.

One forward runs a flat batch of tokens from many sequences (decode tokens first, then
prefill chunks); `AttentionBatch` says which rows belong to whom. Hot ops (RMSNorm,
paged decode attention) come from `ops`, i.e. the workspace's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .config import ModelConfig


@dataclass
class PrefillChunk:
    row_start: int  # first row of this chunk in the flat batch
    num_tokens: int  # rows in the chunk
    context_len: int  # tokens in the cache after this chunk (cached prefix + the chunk)
    block_ids: torch.Tensor  # [ceil(context_len / block_size)] long


@dataclass
class AttentionBatch:
    slot_mapping: torch.Tensor  # [T] long: flat cache slot of each row's K/V
    num_decode: int  # rows 0..num_decode-1 are single-token decodes
    decode_block_table: torch.Tensor | None  # [num_decode, max_blocks] int32
    decode_seq_lens: torch.Tensor | None  # [num_decode] int32, including the new token
    prefills: list[PrefillChunk]


class LlamaModel:
    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict[str, torch.Tensor],
        ops,
        device: torch.device,
        quantization: str | None = None,
    ):
        self.cfg, self.ops = cfg, ops
        w = {k: v.to(device) for k, v in weights.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = self.embed if cfg.tie_word_embeddings else w["lm_head.weight"]
        self.layers = [
            self._fuse_layer(w, f"model.layers.{i}.") for i in range(cfg.num_hidden_layers)
        ]
        if (
            quantization == "w8a8"
        ):  # the decoder's linears; embeddings and the LM head stay in the model dtype
            for layer in self.layers:
                for name in ("qkv", "o", "gate_up", "down"):
                    layer[name] = _quantize_weight(layer[name])
        elif quantization is not None:
            raise ValueError(
                f"quantization {quantization!r} is not supported: use w8a8 or leave it unset"
            )
        self.cos, self.sin = _rope_tables(cfg, device, self.embed.dtype)
        self.comm = None  # disaggregated prefill: a native dispatch/combine around each MLP (disagg.NativeComm)

    @staticmethod
    def _fuse_layer(w: dict, p: str) -> dict:
        """q/k/v and gate/up as one matmul each: fewer, larger GEMMs."""
        a = p + "self_attn."
        qkv_bias = [w.get(a + n + "_proj.bias") for n in "qkv"]
        return {
            "attn_norm": w[p + "input_layernorm.weight"],
            "qkv": torch.cat([w[a + n + "_proj.weight"] for n in "qkv"]),
            "qkv_bias": torch.cat(qkv_bias) if all(b is not None for b in qkv_bias) else None,
            "o": w[a + "o_proj.weight"],
            "mlp_norm": w[p + "post_attention_layernorm.weight"],
            "gate_up": torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]]),
            "down": w[p + "mlp.down_proj.weight"],
        }

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        batch: AttentionBatch,
        kv_caches: list,
        logits_rows: torch.Tensor,
    ) -> torch.Tensor:
        """input_ids, positions: [T]; logits_rows: [S] rows whose next token is sampled -> [S, V]."""
        h = self.embed[input_ids]  # [T, H]
        cos, sin = self.cos[positions], self.sin[positions]  # [T, D]
        for layer, cache in zip(self.layers, kv_caches, strict=True):
            h = h + self._attention(
                self.ops.rmsnorm(h, layer["attn_norm"]), layer, cos, sin, batch, cache
            )
            h = h + self._mlp(self.ops.rmsnorm(h, layer["mlp_norm"]), layer)
        h = self.ops.rmsnorm(h[logits_rows], self.norm)  # only rows that sample
        return (h @ self.lm_head.T).float()

    def _attention(self, x, layer, cos, sin, batch: AttentionBatch, cache):
        cfg, T = self.cfg, x.shape[0]
        d, hq, hkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        qkv = self._linear(x, layer["qkv"])
        if layer["qkv_bias"] is not None:
            qkv = qkv + layer["qkv_bias"]
        qk = _rope(
            qkv[:, : (hq + hkv) * d].view(T, hq + hkv, d), cos, sin
        )  # q and k heads in one pass
        q, k = qk[:, :hq], qk[:, hq:]
        v = qkv[:, (hq + hkv) * d :].view(T, hkv, d)
        cache.store(k, v, batch.slot_mapping)
        out = torch.empty_like(q)  # [T, Hq, D]; every row is written below
        if batch.num_decode:
            nd = batch.num_decode
            k_cache, v_cache, table = cache.for_decode(batch.decode_block_table)
            out[:nd] = self.ops.paged_attention_decode(
                q[:nd].contiguous(), k_cache, v_cache, table, batch.decode_seq_lens
            )
        for chunk in batch.prefills:
            rows = slice(chunk.row_start, chunk.row_start + chunk.num_tokens)
            out[rows] = _prefill_attention(
                q[rows], *cache.blocks(chunk.block_ids), chunk, hq // hkv
            )
        return self._linear(out.view(T, hq * d), layer["o"])

    def _mlp(self, x, layer):
        if self.comm is not None:
            self.comm.dispatch()
        gate, up = self._linear(x, layer["gate_up"]).chunk(2, dim=-1)
        out = self._linear(F.silu(gate) * up, layer["down"])
        if self.comm is not None:
            self.comm.combine()
        return out

    def _linear(self, x, w):  # x [T, K], w [N, K] or (int8 [N, K], scale [N]) -> [T, N]
        if not isinstance(w, tuple):
            return x @ w.T
        codes, scale = self.ops.quantize_activations(
            x
        )  # int8 [T, K], fp32 [T]: one scale per token
        return self.ops.w8a8_gemm(codes, scale, *w).to(x.dtype)


def _quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per output channel: scale = amax(|w|) / 127, codes = round(w / scale) (round half even)."""
    scale = w.float().abs().amax(dim=1).clamp_min(1e-12) / 127.0
    return torch.round(w.float() / scale[:, None]).clamp(-127, 127).to(torch.int8), scale.to(
        w.dtype
    )


def _prefill_attention(q, k_blocks, v_blocks, chunk: PrefillChunk, group: int):
    """Causal attention of a chunk over its whole context (cached prefix + itself).
    q: [n, Hq, D]; the context's blocks: [num_blocks, block_size, Hkv, D] -> [n, Hq, D]."""
    n, ctx = chunk.num_tokens, chunk.context_len
    k = k_blocks.flatten(0, 1)[:ctx]  # [ctx, Hkv, D]
    v = v_blocks.flatten(0, 1)[:ctx]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    # query i sits at position ctx - n + i and sees keys 0..ctx - n + i
    mask = torch.arange(ctx, device=q.device)[None, :] <= torch.arange(n, device=q.device)[
        :, None
    ] + (ctx - n)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask
    )
    return out.transpose(0, 1)


def _rope_tables(cfg: ModelConfig, device, dtype):
    """cos/sin [max_pos, D] in fp32, as Hugging Face computes them, then cast."""
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = (
        torch.arange(cfg.max_position_embeddings, dtype=torch.float32)[:, None] * inv_freq[None, :]
    )
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(device, dtype), emb.sin().to(device, dtype)


def _rope(x, cos, sin):  # x [T, H, D], cos/sin [T, D]: rotate-half RoPE (HF's Llama layout)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
