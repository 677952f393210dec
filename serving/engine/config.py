"""What the engine is asked to run: the model's shape and the engine's knobs.

Torch-free on purpose: the scheduler and block manager read `EngineArgs` too, and they
must import without torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ModelConfig:
    """A Llama-style decoder's shape, named as in a Hugging Face `config.json`."""

    vocab_size: int = 258  # the byte-level tokenizer: 256 bytes + BOS + EOS
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    bos_token_id: int | None = 256
    eos_token_id: list[int] = field(default_factory=lambda: [257])
    torch_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads} (grouped-query attention)"
            )

    @classmethod
    def from_checkpoint(cls, folder: Path) -> ModelConfig:
        path = Path(folder) / "config.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"{folder} has no config.json: pass a Hugging Face checkpoint folder "
                "(config.json, *.safetensors, tokenizer.json) or omit --checkpoint"
            )
        raw = json.loads(path.read_text())
        arch = raw.get("model_type", "llama")
        if arch not in ("llama", "mistral", "qwen2"):
            raise ValueError(
                f"{path}: model_type {arch!r} is not a Llama-style decoder this engine runs"
            )
        rope = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            raise ValueError(
                f"{path}: rope type {rope.get('rope_type')!r} is not supported (only default RoPE)"
            )
        theta = raw.get("rope_theta", rope.get("rope_theta", 10000.0))
        eos = raw.get("eos_token_id")
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw and raw[k] is not None}
        known["rope_theta"] = float(theta)
        known["eos_token_id"] = (
            [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        )
        known["torch_dtype"] = str(raw.get("dtype") or raw.get("torch_dtype") or "float32")
        known.setdefault("bos_token_id", None)
        return cls(**known)


@dataclass
class EngineArgs:
    """The engine's knobs (also the command line: `--max-num-seqs 64` etc.)."""

    checkpoint: str | None = None  # a local HF folder; None: seeded random weights, byte tokenizer
    model_name: str | None = (
        None  # the name /v1/models serves; default: the folder's name or "builtin-random"
    )
    seed: int = 0  # seeds the random weights
    device: str = "auto"  # auto: cuda when present, else cpu
    dtype: str = "auto"  # auto: the checkpoint's dtype on CUDA, float32 on CPU
    block_size: int = 16  # tokens per KV-cache block
    num_blocks: int = 512  # KV-cache blocks (shared by all sequences)
    max_num_seqs: int = 64  # sequences running at once
    max_num_batched_tokens: int = 512  # token budget per step (prefill chunks + decodes)
    # torch's CPU threads: more threads than free cores make every GEMM wait at OpenMP barriers for a
    # descheduled thread (measured 2-20x slower per GEMM on 2 busy cores); the HTTP loop and clients need a core
    num_threads: int = 0  # CPU only; 0: the cores this process may use, minus one (at least 1)
    max_model_len: int | None = (
        None  # prompt + output tokens per sequence; default: the model's limit
    )
    kv_cache_dtype: str = (
        "auto"  # auto: the model's dtype; int8 or fp8 (e4m3): the zoo's kv_quant codes + scales
    )
    quantization: str | None = (
        None  # "w8a8": int8 weights (per channel) x int8 activations (per token)
    )
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    kernels: dict[str, str] = field(
        default_factory=dict
    )  # op -> impl ("reference", "triton", "torch")
    workspace: str | None = None  # kernel workspace folder; None: the built-in zoo
    # A planted regression for tests and benches (tests/serving/tools, bench/serve_criteria_flips.py): sleep
    # this long per prefill chunk, inside the prefill range, so TTFT and the prefill phase move and nothing else.
    prefill_delay_ms: int = 0

    def __post_init__(self) -> None:
        if self.num_threads < 0:
            raise ValueError(
                "num_threads must be >= 0 (0: the cores this process may use, minus one)"
            )
        if (
            self.block_size < 1
            or self.num_blocks < 1
            or self.max_num_seqs < 1
            or self.max_num_batched_tokens < 1
        ):
            raise ValueError(
                "block_size, num_blocks, max_num_seqs and max_num_batched_tokens must be >= 1"
            )
        if self.prefill_delay_ms < 0:
            raise ValueError("prefill_delay_ms must be >= 0")
