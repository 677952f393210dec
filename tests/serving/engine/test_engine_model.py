"""The model without a checkpoint (seeded random weights, byte tokenizer), a tied LM head
against Hugging Face, sampling seeds, stop strings and bad checkpoints."""

from __future__ import annotations

import pytest
from engine_helpers import build_tiny_checkpoint
from infra_agent.serving.engine import EngineArgs, SamplingParams
from infra_agent.serving.engine.tokenizer import ByteTokenizer


def engine(**kw):
    from infra_agent.serving.engine.llm_engine import LLMEngine

    kw.setdefault("num_blocks", 64)
    return LLMEngine(EngineArgs(**kw))


def test_byte_tokenizer_round_trips_utf8():
    tok = ByteTokenizer()
    ids = tok.encode("héllo ✓")
    assert ids[0] == tok.bos_token_id == 256 and max(ids[1:]) < 256
    assert tok.decode(ids) == "héllo ✓"


def test_random_weights_are_seeded():
    greedy = SamplingParams(max_tokens=6, temperature=0)
    a = engine(seed=1).generate(["same prompt"], greedy)[0]["token_ids"]
    b = engine(seed=1).generate(["same prompt"], greedy)[0]["token_ids"]
    c = engine(seed=2).generate(["same prompt"], greedy)[0]["token_ids"]
    assert a == b and a != c


def test_a_request_seed_gives_the_same_tokens_in_any_batch():
    e = engine(seed=0)
    p = SamplingParams(max_tokens=8, temperature=1.0, top_p=0.9, top_k=50, seed=42)
    alone = e.generate(["sampled"], p)[0]["token_ids"]
    others = SamplingParams(max_tokens=8, temperature=1.0)
    batched = e.generate(["other one", "sampled", "and more"], [others, p, others])[1]["token_ids"]
    assert alone == batched
    assert e.generate(["sampled"], SamplingParams(max_tokens=8, temperature=1.0, seed=43))[0]["token_ids"] != alone


def test_stop_string_cuts_the_text(tiny_checkpoint):
    e = engine(checkpoint=str(tiny_checkpoint), block_size=8)
    full = e.generate(["The quick brown fox"], SamplingParams(max_tokens=12, temperature=0))[0]
    assert len(full["text"]) > 4
    stop = full["text"][2:4]
    cut = e.generate(["The quick brown fox"], SamplingParams(max_tokens=12, temperature=0, stop=[stop]))[0]
    assert cut["finish_reason"] == "stop" and cut["text"] == full["text"][:full["text"].find(stop)]


def test_tied_lm_head_matches_hf(tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, LlamaForCausalLM

    build_tiny_checkpoint(tmp_path, seed=3, tie=True)
    assert "lm_head.weight" not in load_file(str(next(tmp_path.glob("*.safetensors"))))
    ids = AutoTokenizer.from_pretrained(tmp_path)("Hello world! Numbers")["input_ids"]
    hf = LlamaForCausalLM.from_pretrained(tmp_path).generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    ours = engine(checkpoint=str(tmp_path), block_size=8).generate([ids], SamplingParams(max_tokens=8, temperature=0))
    assert ours[0]["token_ids"] == hf[0, len(ids):].tolist()


def test_bad_checkpoints_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        engine(checkpoint=str(tmp_path))
    build_tiny_checkpoint(tmp_path)
    for f in tmp_path.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(FileNotFoundError, match="safetensors"):
        engine(checkpoint=str(tmp_path))
