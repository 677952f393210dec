"""Build a small Llama checkpoint folder offline: random weights from a `LlamaConfig` and
a byte-level BPE tokenizer trained on a few sentences (`save_pretrained`). For tests and
benchmarks; needs `transformers` and `tokenizers` (test dependencies), downloads nothing."""

from __future__ import annotations

from pathlib import Path

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A paged KV cache stores keys and values in fixed-size blocks.",
    "Continuous batching admits new requests while others decode.",
    "Prefix caching reuses the blocks of a shared system prompt.",
    "Hello world! Numbers 0123456789 and symbols ()[]{}<>.",
]


def build_tiny_checkpoint(
    folder: str | Path,
    seed: int = 0,
    tie: bool = False,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_positions: int = 256,
    vocab_size: int = 320,
    initializer_range: float = 0.2,
    byte_alphabet: bool = True,
) -> Path:
    """`byte_alphabet=False` keeps only the characters of SENTENCES in the vocabulary (ASCII), so
    every token decodes to text on its own: an engine then streams a text chunk per token instead of
    holding back partial UTF-8. (vLLM's CPU build also needs head_dim = hidden_size / num_heads of
    at least 32.)"""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_alphabet else [],
    )
    tok.train_from_iterator(SENTENCES * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(folder)
    cfg = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tie,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        initializer_range=initializer_range,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder
