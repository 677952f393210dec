"""Builds a tiny Llama checkpoint for the engine tests: random weights from a LlamaConfig
and a byte-level BPE tokenizer trained on a few sentences; nothing is downloaded."""

from __future__ import annotations

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A paged KV cache stores keys and values in fixed-size blocks.",
    "Continuous batching admits new requests while others decode.",
    "Prefix caching reuses the blocks of a shared system prompt.",
    "Hello world! Numbers 0123456789 and symbols ()[]{}<>.",
]


def build_tiny_checkpoint(folder, seed: int = 0, tie: bool = False) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(folder)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                      tie_word_embeddings=tie, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                      initializer_range=0.2)
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(folder)
