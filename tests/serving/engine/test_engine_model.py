"""The model without a checkpoint (seeded random weights, byte tokenizer), a tied LM head
against Hugging Face, sampling seeds, stop strings and bad checkpoints."""

from __future__ import annotations

import pytest
from conftest import in_forked_child

from infra_agent.serving.engine import EngineArgs, SamplingParams
from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint
from infra_agent.serving.engine.tokenizer import ByteTokenizer, HFTokenizer, IncrementalDetokenizer


def engine(**kw):
    from infra_agent.serving.engine.llm_engine import LLMEngine

    kw.setdefault("num_blocks", 64)
    return LLMEngine(EngineArgs(**kw))


def test_byte_tokenizer_round_trips_utf8():
    tok = ByteTokenizer()
    ids = tok.encode("héllo ✓")
    assert ids[0] == tok.bos_token_id == 256 and max(ids[1:]) < 256
    assert tok.decode(ids) == "héllo ✓"


class CountingTokenizer:
    """A tokenizer that records how many ids each decode call was given."""

    def __init__(self, tok):
        self.tok, self.sizes = tok, []

    def decode(self, ids):
        self.sizes.append(len(ids))
        return self.tok.decode(ids)


def stream(tok, ids) -> list[str]:
    detok = IncrementalDetokenizer(tok)
    return [detok.update(ids[:i], final=i == len(ids)) for i in range(1, len(ids) + 1)]


@pytest.mark.parametrize("which", ["bytes", "checkpoint"])
def test_streamed_text_is_the_full_decode_and_each_step_decodes_a_short_window(
    which, tiny_checkpoint
):
    """Deltas joined are exactly the whole output decoded (multi-byte characters split over
    tokens, random ids of a byte-level BPE), nothing half a character is streamed, and a
    step's decode covers the last piece and the new ids, not the whole output."""
    import random

    rng = random.Random(0)
    tok = ByteTokenizer() if which == "bytes" else HFTokenizer(tiny_checkpoint)
    text = "".join(rng.choice(["a", " ", "é", "日本", "🙂", "\n", "ok "]) for _ in range(400))
    ids = tok.encode(text, add_special_tokens=False)
    counting = CountingTokenizer(tok)
    deltas = stream(counting, ids)
    assert "".join(deltas) == tok.decode(ids) == text
    assert not any("\ufffd" in d for d in deltas)
    assert len(ids) > 400 and max(counting.sizes) <= 16  # the longest character is 4 byte tokens
    for _ in range(50):
        random_ids = [rng.randrange(tok.vocab_size) for _i in range(rng.randint(1, 60))]
        assert "".join(stream(tok, random_ids)) == tok.decode(random_ids)


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
    assert (
        e.generate(["sampled"], SamplingParams(max_tokens=8, temperature=1.0, seed=43))[0][
            "token_ids"
        ]
        != alone
    )


def test_stop_string_cuts_the_text(tiny_checkpoint):
    e = engine(checkpoint=str(tiny_checkpoint), block_size=8)
    full = e.generate(["The quick brown fox"], SamplingParams(max_tokens=12, temperature=0))[0]
    assert len(full["text"]) > 4
    stop = full["text"][2:4]
    cut = e.generate(
        ["The quick brown fox"], SamplingParams(max_tokens=12, temperature=0, stop=[stop])
    )[0]
    assert cut["finish_reason"] == "stop" and cut["text"] == full["text"][: full["text"].find(stop)]


def test_tied_lm_head_matches_hf(tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, LlamaForCausalLM

    build_tiny_checkpoint(tmp_path, seed=3, tie=True)
    assert "lm_head.weight" not in load_file(str(next(tmp_path.glob("*.safetensors"))))
    ids = AutoTokenizer.from_pretrained(tmp_path)("Hello world! Numbers")["input_ids"]
    hf = LlamaForCausalLM.from_pretrained(tmp_path).generate(
        torch.tensor([ids]), max_new_tokens=8, do_sample=False
    )
    ours = engine(checkpoint=str(tmp_path), block_size=8).generate(
        [ids], SamplingParams(max_tokens=8, temperature=0)
    )
    assert ours[0]["token_ids"] == hf[0, len(ids) :].tolist()


def test_bad_checkpoints_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        engine(checkpoint=str(tmp_path))
    build_tiny_checkpoint(tmp_path)
    for f in tmp_path.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(FileNotFoundError, match="safetensors"):
        engine(checkpoint=str(tmp_path))


def _zoo_has(kernel: str) -> bool:
    from infra_agent.kernels.workspace import load_workspace

    return kernel in load_workspace().kernels


needs_kv_quant = pytest.mark.skipif(
    not _zoo_has("kv_quant"), reason="the kernel zoo has no kv_quant kernel"
)


@needs_kv_quant
@pytest.mark.parametrize("kind,code_dtype", [("int8", "torch.int8"), ("fp8", "torch.uint8")])
def test_quantised_kv_cache_keeps_greedy_tokens_on_the_random_model(kind, code_dtype):
    prompts = ["The quick brown fox", "Hello world! Numbers 0123456789", "paged KV " * 6]
    greedy = SamplingParams(max_tokens=10, temperature=0)
    full = engine(seed=5).generate(prompts, greedy)
    quant = engine(seed=5, kv_cache_dtype=kind)
    assert (
        str(quant.runner.kv_caches[0].k.dtype) == code_dtype
    )  # 1-byte codes (+ fp32 scales) really stored
    assert quant.runner.ops.choices["kv_quant"] == f"kv_quant:reference ({kind})"
    assert [o["token_ids"] for o in quant.generate(prompts, greedy)] == [
        o["token_ids"] for o in full
    ]


def _kv_quant_runs(checkpoint) -> list:
    greedy = SamplingParams(max_tokens=4, temperature=0)
    return [
        engine(
            checkpoint=str(checkpoint),
            block_size=8,
            kv_cache_dtype="int8",
            kernels={"kv_quant": impl},
        ).generate(["The quick brown fox"], greedy)[0]["token_ids"]
        for impl in ("reference", "triton")
    ]


@needs_kv_quant
def test_triton_kv_quant_gives_the_reference_tokens(tiny_checkpoint):
    runs = in_forked_child(_kv_quant_runs, tiny_checkpoint)  # interpreted Triton stays in the child
    assert runs[0] == runs[1]


def _w8a8_runs(prompts: list) -> dict:
    greedy = SamplingParams(max_tokens=8, temperature=0)
    runs = {"full": [o["token_ids"] for o in engine(seed=5).generate(prompts, greedy)]}
    for impl, n, max_tokens in (
        ("reference", 2, 8),
        ("triton", 1, 4),
    ):  # interpreted Triton is slow: keep it short
        e = engine(seed=5, quantization="w8a8", kernels={"w8a8_gemm": impl})
        runs[impl + "_choice"] = e.runner.ops.choices["w8a8_gemm"]
        runs[impl + "_int8"] = e.runner.model.layers[0]["qkv"][0].dtype == __import__("torch").int8
        runs[impl] = [
            o["token_ids"]
            for o in e.generate(prompts[:n], SamplingParams(max_tokens=max_tokens, temperature=0))
        ]
    return runs


@pytest.mark.skipif(not _zoo_has("w8a8_gemm"), reason="the kernel zoo has no w8a8_gemm kernel")
def test_w8a8_linears_through_the_zoo_kernel():
    runs = in_forked_child(_w8a8_runs, ["The quick brown fox", "Hello world! Numbers 0123456789"])
    for impl in ("reference", "triton"):
        assert (
            runs[impl + "_choice"] == f"w8a8_gemm:{impl}" and runs[impl + "_int8"]
        )  # int8 codes stored
    assert runs["reference"] == runs["full"]  # the random model's greedy tokens survive W8A8
    assert runs["triton"][0] == runs["reference"][0][:4]


def test_planted_prefill_delay_lives_in_the_runner_and_sleeps_per_prefill_chunk(monkeypatch):
    """--prefill-delay-ms (tests/serving/tools, bench/serve_criteria_flips.py) wraps the runner, so
    `LLMEngine.step` stays schedule -> run -> postprocess; it sleeps once per prefill chunk only."""
    from infra_agent.serving.engine import planted
    from infra_agent.serving.engine.model_runner import ModelRunner

    assert type(engine().runner) is ModelRunner
    delayed = engine(prefill_delay_ms=30, max_num_batched_tokens=8)
    assert isinstance(delayed.runner, planted.PrefillDelayRunner)
    slept: list[float] = []
    monkeypatch.setattr(planted.time, "sleep", slept.append)
    delayed.generate(
        [list(range(1, 21))], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    )
    assert (
        slept == [0.03] * 3
    )  # a 20-token prompt in chunks of 8: 3 prefill chunks, 2 decodes without a delay
