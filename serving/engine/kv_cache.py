"""One layer's paged KV cache: [num_blocks, block_size, Hkv, D] for K and for V, in the
model's dtype or quantised (int8 or fp8 e4m3 codes with one FP32 scale per token and head,
the zoo's `kv_quant` kernel). Attention reads dense blocks in the model's dtype either way:
a quantised cache dequantises just the blocks a step reads."""

from __future__ import annotations

import torch

KV_CACHE_DTYPES = ("auto", "int8", "fp8")


class KVCache:
    def __init__(self, shape: tuple[int, int, int, int], dtype: torch.dtype, device: torch.device):
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    def store(self, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        """k, v [T, Hkv, D] into flat slots [T] (block * block_size + offset)."""
        self.k.view(-1, *self.k.shape[2:]).index_copy_(0, slots, k)
        self.v.view(-1, *self.v.shape[2:]).index_copy_(0, slots, v)

    def blocks(self, block_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of these blocks: [n, block_size, Hkv, D] each."""
        return self.k.index_select(0, block_ids), self.v.index_select(
            0, block_ids
        )  # faster than k[ids] on CPU

    def for_decode(self, block_table: torch.Tensor):
        """(k_cache, v_cache, block_table) for paged_attention_decode."""
        return self.k, self.v, block_table

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.k[0, 0].numel() * self.k.element_size()


class QuantizedKVCache(KVCache):
    def __init__(self, shape, dtype: torch.dtype, device, kind: str, quantize, dequantize):
        self.kind, self.dtype = kind, dtype
        self._quantize, self._dequantize = quantize, dequantize
        code_dtype = torch.int8 if kind == "int8" else torch.uint8  # fp8: float8_e4m3fn bits
        self.k = torch.zeros(shape, dtype=code_dtype, device=device)
        self.v = torch.zeros(shape, dtype=code_dtype, device=device)
        self.k_scale = torch.zeros(shape[:3], dtype=torch.float32, device=device)
        self.v_scale = torch.zeros(shape[:3], dtype=torch.float32, device=device)

    def store(self, k, v, slots) -> None:
        for x, codes, scales in ((k, self.k, self.k_scale), (v, self.v, self.v_scale)):
            c, s = self._quantize(x)  # [T, Hkv, D] codes, [T, Hkv] scales
            codes.view(-1, *codes.shape[2:]).index_copy_(0, slots, c)
            scales.view(-1, scales.shape[2]).index_copy_(0, slots, s)

    def blocks(self, block_ids):
        return self._read(self.k, self.k_scale, block_ids), self._read(
            self.v, self.v_scale, block_ids
        )

    def _read(self, codes, scales, block_ids):
        n, bs, h, d = len(block_ids), *codes.shape[1:]
        flat = self._dequantize(
            codes[block_ids].reshape(n * bs, h, d), scales[block_ids].reshape(n * bs, h)
        )
        return flat.to(self.dtype).view(n, bs, h, d)

    def for_decode(self, block_table):
        """Dequantise each block the batch reads once, into a compact cache, and renumber
        the table to point into it."""
        ids, renumbered = torch.unique(block_table.long(), return_inverse=True)
        k, v = self.blocks(ids)
        return k, v, renumbered.to(torch.int32).contiguous()

    @property
    def bytes_per_token(self) -> int:
        return 2 * (self.k[0, 0].numel() + 4 * self.k_scale[0, 0].numel())
