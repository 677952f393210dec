"""Datasets: exact prompt lengths through a real (test-trained) tokenizer, ShareGPT files."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from infra_agent.serving.loadgen import (
    PlainTokenizer,
    random_requests,
    read_sharegpt,
    shared_prefix_requests,
    sharegpt_requests,
)

TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "paged attention reads blocks of keys and values",
    "a scheduler batches prefill and decode steps",
    "tokens stream back to the client one chunk at a time",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        TEXT * 20,
        trainers.BpeTrainer(
            vocab_size=300,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    folder = tmp_path_factory.mktemp("tok")
    tok.save(str(folder / "tokenizer.json"))
    return PlainTokenizer(folder)


def test_random_prompts_have_exact_token_lengths(tokenizer):
    reqs = random_requests(
        20, input_len=24, output_len=8, range_ratio=0.5, seed=3, tokenizer=tokenizer
    )
    assert all(r.exact for r in reqs)
    for r in reqs:
        assert len(tokenizer.encode(r.prompt)) == r.prompt_tokens
        assert 12 <= r.prompt_tokens <= 36 and 4 <= r.max_tokens <= 12
    assert len({r.prompt_tokens for r in reqs}) > 1
    again = random_requests(
        20, input_len=24, output_len=8, range_ratio=0.5, seed=3, tokenizer=tokenizer
    )
    assert [r.prompt for r in again] == [r.prompt for r in reqs]


def test_without_a_tokenizer_lengths_are_flagged_approximate():
    reqs = random_requests(3, input_len=10, output_len=4)
    assert not any(r.exact for r in reqs) and all(len(r.prompt.split()) == 10 for r in reqs)
    with pytest.raises(ValueError):
        random_requests(0)


def test_shared_prefix_groups_share_their_prefix(tokenizer):
    reqs = shared_prefix_requests(
        num_prefixes=2, per_prefix=3, prefix_len=16, suffix_len=4, output_len=2, tokenizer=tokenizer
    )
    assert len(reqs) == 6
    prefixes = {r.prompt[: len(reqs[0].prompt) // 2] for r in reqs[0::2]}
    assert len(prefixes) == 1  # every other request shares the first group's prefix


def test_sharegpt_file(tmp_path, tokenizer):
    data = [
        {"conversations": [{"from": "human", "value": TEXT[0]}, {"from": "gpt", "value": TEXT[1]}]},
        {"conversations": [{"from": "human", "value": "only one turn"}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    reqs = sharegpt_requests(read_sharegpt(path), 10, tokenizer=tokenizer, max_output_len=3)
    assert len(reqs) == 1 and reqs[0].prompt == TEXT[0] and reqs[0].max_tokens == 3
    path.write_text("[]")
    with pytest.raises(ValueError, match="ShareGPT format"):
        read_sharegpt(path)
