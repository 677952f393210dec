"""A model's weights, keyed by their Hugging Face names: seeded random, or a checkpoint's
`*.safetensors` files. Returns plain tensors; `model.py` decides how to use them."""

from __future__ import annotations

from pathlib import Path

import torch

from .config import ModelConfig


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Llama-style checkpoint holds, with its shape ([out, in] for linears)."""
    h, q_dim, kv_dim = (
        cfg.hidden_size,
        cfg.num_attention_heads * cfg.head_dim,
        cfg.num_key_value_heads * cfg.head_dim,
    )
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, h), "model.norm.weight": (h,)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q_dim, h),
            p + "self_attn.k_proj.weight": (kv_dim, h),
            p + "self_attn.v_proj.weight": (kv_dim, h),
            p + "self_attn.o_proj.weight": (h, q_dim),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (cfg.intermediate_size, h),
            p + "mlp.up_proj.weight": (cfg.intermediate_size, h),
            p + "mlp.down_proj.weight": (h, cfg.intermediate_size),
        }
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, h)
    return shapes


def random_weights(cfg: ModelConfig, seed: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Seeded: the same seed gives the same model on every machine (generated on CPU)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in weight_shapes(cfg).items():
        if name.endswith("norm.weight"):
            out[name] = torch.ones(shape)
        else:
            out[name] = torch.randn(shape, generator=gen) * 0.02
    return {k: v.to(dtype) for k, v in out.items()}


def load_checkpoint_weights(
    folder: Path, cfg: ModelConfig, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"{folder} has no *.safetensors files (only safetensors checkpoints load)"
        )
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors |= load_file(str(f))
    expected = weight_shapes(cfg)
    missing = [n for n in expected if n not in tensors]
    if missing:
        raise ValueError(f"{folder}: checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise ValueError(
                f"{folder}: {name} has shape {tuple(tensors[name].shape)}, config says {shape}"
            )
    # biases (Qwen2-style q/k/v) are kept; anything else unknown is ignored
    keep = set(expected) | {n for n in tensors if n.endswith("_proj.bias")}
    return {n: t.to(dtype) for n, t in tensors.items() if n in keep}
