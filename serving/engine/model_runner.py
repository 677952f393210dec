"""The one object that owns the device: the model's weights, the KV-cache tensors, and
the step that turns a scheduled batch into sampled tokens."""

from __future__ import annotations

import os

import torch

from .config import EngineArgs, ModelConfig
from .kv_cache import KV_CACHE_DTYPES, KVCache, QuantizedKVCache
from .model import AttentionBatch, LlamaModel, PrefillChunk
from .ops import KernelOps
from .sampler import Sampler
from .scheduler import ScheduledSeq
from .tokenizer import ByteTokenizer
from .weights import load_checkpoint_weights, random_weights


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def cpu_threads() -> int:
    """One less than the cores this process may run on, at least 1 (EngineArgs.num_threads)."""
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    return max(1, cores - 1)


def resolve_dtype(name: str, cfg: ModelConfig, device: torch.device) -> torch.dtype:
    if name == "auto":
        name = cfg.torch_dtype if device.type == "cuda" else "float32"
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}: use float32, bfloat16, float16 or float64")
    return dtype


class ModelRunner:
    def __init__(self, args: EngineArgs, cfg: ModelConfig):
        self.cfg, self.block_size = cfg, args.block_size
        self.device = resolve_device(args.device)
        self.dtype = resolve_dtype(args.dtype, cfg, self.device)
        if self.device.type == "cpu":  # process-wide: the engine thread is the one that runs torch
            torch.set_num_threads(args.num_threads or cpu_threads())
        self.ops = KernelOps(args.kernels, self.device, args.workspace, cfg.rms_norm_eps)
        if args.checkpoint:
            weights = load_checkpoint_weights(args.checkpoint, cfg, self.dtype)
        else:
            weights = random_weights(cfg, args.seed, self.dtype)
        if args.quantization == "w8a8":
            self.ops.enable_w8a8()
        self.model = LlamaModel(cfg, weights, self.ops, self.device, args.quantization)
        self.kv_caches = self._make_kv_caches(args, cfg)
        # Random weights with the byte tokenizer sample only ids that decode to text, so the
        # default engine streams token by token (ByteTokenizer.text_token_ids says why).
        self.sampler = Sampler(
            args.seed, None if args.checkpoint else ByteTokenizer.text_token_ids()
        )

    def _make_kv_caches(self, args: EngineArgs, cfg: ModelConfig) -> list[KVCache]:
        if args.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv_cache_dtype {args.kv_cache_dtype!r} is not one of {KV_CACHE_DTYPES}"
            )
        shape = (args.num_blocks, args.block_size, cfg.num_key_value_heads, cfg.head_dim)
        if args.kv_cache_dtype == "auto":
            return [KVCache(shape, self.dtype, self.device) for _ in range(cfg.num_hidden_layers)]
        quantize, dequantize = self.ops.kv_quantizer(args.kv_cache_dtype)
        return [
            QuantizedKVCache(
                shape, self.dtype, self.device, args.kv_cache_dtype, quantize, dequantize
            )
            for _ in range(cfg.num_hidden_layers)
        ]

    def run(self, batch: list[ScheduledSeq]) -> dict[int, int]:
        """One forward over the batch; returns {seq_id: sampled token} for the sequences
        whose chunk reached their last token."""
        decodes = [s for s in batch if s.num_tokens == 1]
        prefills = [s for s in batch if s.num_tokens > 1]
        ordered = decodes + prefills  # the model wants decode rows first
        input_ids, positions, slots = [], [], []
        for item in ordered:
            seq, start = item.seq, item.seq.num_computed_tokens
            for pos in range(start, start + item.num_tokens):
                input_ids.append(seq.token_ids[pos])
                positions.append(pos)
                slots.append(
                    seq.block_table[pos // self.block_size] * self.block_size
                    + pos % self.block_size
                )
        attn = self._attention_batch(decodes, prefills, slots)
        logits_rows, sampling = [], []
        row = 0
        for item in ordered:
            row += item.num_tokens
            if item.samples:
                logits_rows.append(row - 1)
                sampling.append(item.seq)
        if not sampling:  # only mid-prompt chunks: compute K/V, sample nothing
            logits_rows = [0]
        logits = self.model.forward(
            self._long(input_ids),
            self._long(positions),
            attn,
            self.kv_caches,
            self._long(logits_rows),
        )
        if not sampling:
            return {}
        tokens = self.sampler.sample(
            logits, [s.params for s in sampling], [s.num_output_tokens for s in sampling]
        )
        return {s.seq_id: t for s, t in zip(sampling, tokens, strict=True)}

    def _attention_batch(
        self, decodes: list[ScheduledSeq], prefills: list[ScheduledSeq], slots
    ) -> AttentionBatch:
        table = seq_lens = None
        if decodes:
            width = max(len(s.seq.block_table) for s in decodes)
            table = torch.tensor(
                [s.seq.block_table + [0] * (width - len(s.seq.block_table)) for s in decodes],
                dtype=torch.int32,
                device=self.device,
            )
            seq_lens = torch.tensor(
                [s.seq.num_computed_tokens + 1 for s in decodes],
                dtype=torch.int32,
                device=self.device,
            )
        chunks, row = [], len(decodes)
        for item in prefills:
            ctx = item.seq.num_computed_tokens + item.num_tokens
            num_blocks = -(-ctx // self.block_size)
            chunks.append(
                PrefillChunk(
                    row, item.num_tokens, ctx, self._long(item.seq.block_table[:num_blocks])
                )
            )
            row += item.num_tokens
        return AttentionBatch(self._long(slots), len(decodes), table, seq_lens, chunks)

    def read_kv(
        self, block_table: list[int], num_tokens: int
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The first num_tokens tokens' K and V, per layer: [num_tokens, Hkv, D] each (model dtype)."""
        ids = self._long(block_table[: -(-num_tokens // self.block_size)])
        return [
            tuple(t.flatten(0, 1)[:num_tokens].clone() for t in cache.blocks(ids))
            for cache in self.kv_caches
        ]

    def write_kv(self, block_table: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Store per-layer K and V of positions 0..n-1 into a sequence's blocks."""
        n = kv[0][0].shape[0]
        slots = self._long(
            [
                block_table[p // self.block_size] * self.block_size + p % self.block_size
                for p in range(n)
            ]
        )
        for cache, (k, v) in zip(self.kv_caches, kv, strict=True):
            cache.store(k.to(self.device), v.to(self.device), slots)

    def _long(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)
