"""Greedy tokens of the engine equal Hugging Face `generate` on the same tiny checkpoint:
alone, in one continuous batch, chunked prefill on and off, with prefix-cache hits, and
with the zoo's Triton kernels (interpreted) instead of the torch references."""

from __future__ import annotations

import pytest
from conftest import in_forked_child

from infra_agent.serving.engine import EngineArgs, SamplingParams

MAX_NEW = 10
SHARED = "A paged KV cache stores keys and values in fixed-size blocks. "
PROMPTS = [  # 8 prompts of different lengths; the last three share a prefix
    "Hi",
    "The quick brown fox",
    "Continuous batching admits new requests while others decode.",
    "Hello world! Numbers 0123456789",
    "Prefix caching reuses the blocks of a shared system prompt. " * 3,
    SHARED + "The quick",
    SHARED + "Hello world!",
    SHARED * 2 + "Prefix",
]


@pytest.fixture(scope="module")
def prompt_ids(tiny_checkpoint):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    return [tok(p)["input_ids"] for p in PROMPTS]


@pytest.fixture(scope="module")
def hf_tokens(tiny_checkpoint, prompt_ids):
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32).eval()
    out = []
    for ids in prompt_ids:
        gen = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False)
        out.append(gen[0, len(ids) :].tolist())
    return out


def make_engine(checkpoint, **kw):
    from infra_agent.serving.engine.llm_engine import LLMEngine

    kw.setdefault("num_blocks", 128)
    return LLMEngine(EngineArgs(checkpoint=str(checkpoint), block_size=8, **kw))


GREEDY = SamplingParams(max_tokens=MAX_NEW, temperature=0)


def test_tokenizer_matches_hf(tiny_checkpoint, prompt_ids):
    engine_tok = make_engine(tiny_checkpoint).tokenizer
    assert [engine_tok.encode(p) for p in PROMPTS] == prompt_ids
    assert len({len(ids) for ids in prompt_ids}) == len(PROMPTS)  # all lengths differ


def test_each_prompt_alone(tiny_checkpoint, prompt_ids, hf_tokens):
    engine = make_engine(tiny_checkpoint, enable_prefix_caching=False)
    for ids, expected in zip(prompt_ids, hf_tokens, strict=True):
        assert engine.generate([ids], GREEDY)[0]["token_ids"] == expected


@pytest.mark.parametrize("chunked,budget", [(True, 7), (False, 256)])
def test_one_continuous_batch(tiny_checkpoint, prompt_ids, hf_tokens, chunked, budget):
    engine = make_engine(
        tiny_checkpoint,
        enable_chunked_prefill=chunked,
        max_num_batched_tokens=budget,
        enable_prefix_caching=False,
    )
    outs = engine.generate(prompt_ids, GREEDY)
    assert [o["token_ids"] for o in outs] == hf_tokens
    assert engine.block_manager.num_free_blocks == 128


def test_prefix_cache_hits_give_the_same_tokens(tiny_checkpoint, prompt_ids, hf_tokens):
    engine = make_engine(tiny_checkpoint, max_num_batched_tokens=32)
    first = engine.generate(prompt_ids, GREEDY)
    hits_first = engine.scheduler.num_prefix_cache_hits
    second = engine.generate(prompt_ids, GREEDY)  # every prompt's full blocks are cached now
    assert [o["token_ids"] for o in first] == hf_tokens
    assert [o["token_ids"] for o in second] == hf_tokens
    assert engine.scheduler.num_prefix_cache_hits - hits_first >= sum(
        len(i) // 8 * 8 - 8 for i in prompt_ids
    )


def test_preemption_keeps_tokens(tiny_checkpoint, prompt_ids, hf_tokens):
    # 12 blocks of 8 tokens cannot hold all 8 sequences: some are preempted and recomputed
    engine = make_engine(tiny_checkpoint, num_blocks=12, max_num_batched_tokens=64)
    outs = engine.generate(prompt_ids, GREEDY)
    assert engine.scheduler.num_preemptions > 0
    assert [o["token_ids"] for o in outs] == hf_tokens


def _kernel_runs(checkpoint, ids: list) -> dict:
    """Greedy tokens of the engine with each kernel choice (runs in a forked child: see in_forked_child)."""
    from infra_agent.kernels.workspace import load_workspace

    ops = [op for op in ("rmsnorm", "paged_attention_decode") if op in load_workspace().kernels]
    out = {}
    for name, kernels in (
        ("reference", {op: "reference" for op in ops}),
        ("triton", {op: "triton" for op in ops}),
        ("plain", {"paged_attention_decode": "torch"}),
    ):
        e = make_engine(checkpoint, kernels=kernels)
        out[name] = {
            "choices": dict(e.runner.ops.choices),
            "tokens": [o["token_ids"] for o in e.generate(ids, GREEDY)],
        }
    out["ops"] = ops
    return out


def test_triton_kernels_agree_with_torch_references(tiny_checkpoint, prompt_ids, hf_tokens):
    runs = in_forked_child(_kernel_runs, tiny_checkpoint, prompt_ids[:4])
    assert all(runs["triton"]["choices"][op] == f"{op}:triton" for op in runs["ops"])
    assert all(runs["reference"]["choices"][op] == f"{op}:reference" for op in runs["ops"])
    assert runs["reference"]["tokens"] == hf_tokens[:4]
    assert runs["plain"]["tokens"] == hf_tokens[:4]  # the engine's batched torch attention
    assert runs["triton"]["tokens"] == runs["reference"]["tokens"]
