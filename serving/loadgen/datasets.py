"""The requests of a benchmark: random, ShareGPT-format, or shared-prefix prompts.

A `Tokenizer` is anything with `encode(text) -> list[int]` and `decode(ids) -> str`
(`PlainTokenizer`: the built-in engine's, loaded from a checkpoint folder). With one,
random prompts have exact token lengths: random ids are decoded, re-encoded and
trimmed or topped up until the re-encoding has the asked length (decode -> re-encode
drifts: vllm#17408). Without one, lengths are approximate (words) and flagged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class BenchRequest:
    prompt: str
    prompt_tokens: int  # exact when `exact`, else an estimate (words)
    max_tokens: int  # output length asked for
    exact: bool = True


class PlainTokenizer:
    """A serving engine's tokenizer (a checkpoint's tokenizer.json, or bytes without one), counting
    prompt tokens without the special tokens the engine adds itself (vLLM's rule)."""

    def __init__(self, checkpoint: str | Path | None):
        from ..engine.tokenizer import load_tokenizer  # the same tokenizer the built-in engine uses

        self.checkpoint = str(checkpoint) if checkpoint else None
        self._tok = load_tokenizer(self.checkpoint)
        self.vocab_size = self._tok.vocab_size

    def __reduce__(self):  # pickled as its checkpoint (to the load generator's process)
        return PlainTokenizer, (self.checkpoint,)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


_WORDS = (
    "the model serves tokens while the scheduler batches requests and the cache keeps blocks of keys "
    "and values for every layer of attention so decode reads what prefill wrote"
).split()


def _lengths(rng: np.random.Generator, mean: int, range_ratio: float, n: int) -> list[int]:
    """Uniform in [mean*(1-r), mean*(1+r)], at least 1 (vLLM's random dataset rule)."""
    low, high = max(1, int(mean * (1 - range_ratio))), max(1, int(mean * (1 + range_ratio)))
    return rng.integers(low, high + 1, size=n).tolist()


def _stable_ids(rng: np.random.Generator, tok: Tokenizer, vocab: int) -> list[int]:
    """Token ids to draw prompts from. Best: ids that decode to a space-led word and re-encode to
    themselves, since a sequence of them re-encodes exactly (whitespace pre-tokenisers split words
    apart). Else printable ids that re-encode to themselves (a byte tokenizer: every ASCII letter),
    left to the re-encode loop. Tested on a sample of the vocabulary (cheap for 150k vocabularies)."""
    sample = rng.choice(vocab, size=min(vocab, 4096), replace=False).tolist()
    printable = [
        t
        for t in sample
        if (text := tok.decode([t])).isprintable() and text and tok.encode(text) == [t]
    ]
    words = [t for t in printable if tok.decode([t]).startswith(" ")]
    for pool in (words, printable):
        if len(pool) >= 4:
            return pool
    return list(range(vocab))


def _exact_prompt(
    rng: np.random.Generator, tok: Tokenizer, pool: list[int], length: int
) -> tuple[str, int]:
    ids = rng.choice(pool, size=length).tolist()
    for _ in range(16):  # decode -> re-encode until the length holds (it usually does at once)
        text = tok.decode(ids)
        ids = tok.encode(text)
        if len(ids) == length:
            return text, length
        ids = (
            ids[:length]
            if len(ids) > length
            else ids + rng.choice(pool, size=length - len(ids)).tolist()
        )
    text = tok.decode(ids)
    return text, len(tok.encode(text))


def random_requests(
    n: int,
    input_len: int = 128,
    output_len: int = 32,
    range_ratio: float = 0.0,
    seed: int = 0,
    tokenizer: Tokenizer | None = None,
    vocab_size: int | None = None,
) -> list[BenchRequest]:
    """n prompts of about `input_len` tokens asking for about `output_len` tokens each."""
    if n < 1 or input_len < 1 or output_len < 1:
        raise ValueError("n, input_len and output_len must each be >= 1")
    if not 0 <= range_ratio < 1:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio}")
    rng = np.random.default_rng(seed)
    ins, outs = _lengths(rng, input_len, range_ratio, n), _lengths(rng, output_len, range_ratio, n)
    requests = []
    pool: list[int] = []
    if tokenizer is not None:
        vocab = vocab_size or getattr(tokenizer, "vocab_size", None) or 256
        pool = _stable_ids(rng, tokenizer, vocab)
    for i_len, o_len in zip(ins, outs, strict=True):
        if tokenizer is not None:
            text, actual = _exact_prompt(rng, tokenizer, pool, i_len)
            requests.append(BenchRequest(text, actual, o_len, exact=actual == i_len))
        else:
            words = rng.choice(_WORDS, size=i_len).tolist()
            requests.append(BenchRequest(" ".join(words), i_len, o_len, exact=False))
    return requests


def shared_prefix_requests(
    num_prefixes: int,
    per_prefix: int,
    prefix_len: int,
    suffix_len: int,
    output_len: int,
    seed: int = 0,
    tokenizer: Tokenizer | None = None,
) -> list[BenchRequest]:
    """Groups of prompts that share a long prefix (a prefix cache's best case), interleaved."""
    rng = np.random.default_rng(seed)
    prefixes = random_requests(num_prefixes, prefix_len, 1, seed=seed, tokenizer=tokenizer)
    groups = []
    for p in prefixes:
        suffixes = random_requests(
            per_prefix, suffix_len, output_len, seed=int(rng.integers(1 << 31)), tokenizer=tokenizer
        )
        groups.append(
            [
                BenchRequest(
                    p.prompt + " " + s.prompt,
                    p.prompt_tokens + s.prompt_tokens,
                    output_len,
                    exact=False,
                )
                for s in suffixes
            ]
        )
    return [g[i] for i in range(per_prefix) for g in groups]


def read_sharegpt(path: str | Path) -> list[tuple[str, str]]:
    """(first human turn, its reply) of each conversation of a ShareGPT-format file with at
    least two turns; read once, sampled by sharegpt_requests as often as needed."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read ShareGPT file {path}: {exc}") from None
    except RecursionError:  # lists in lists thousands deep: no conversation is shaped like that
        raise ValueError(
            f"{path} nests too deeply to be a ShareGPT file (a list of conversations)"
        ) from None
    pairs = []
    for item in data if isinstance(data, list) else []:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if (
            isinstance(turns, list)
            and len(turns) >= 2
            and all(isinstance(t, dict) for t in turns[:2])
        ):
            prompt, reply = (turns[i].get("value", "") for i in (0, 1))
            if isinstance(prompt, str) and isinstance(
                reply, str
            ):  # str() of a deep list would recurse
                pairs.append((prompt, reply))
    if not pairs:
        raise ValueError(
            f"{path} has no conversations with at least two turns (ShareGPT format: "
            '[{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}])'
        )
    return pairs


def sharegpt_requests(
    pairs: list[tuple[str, str]],
    n: int,
    tokenizer: Tokenizer | None = None,
    seed: int = 0,
    max_output_len: int | None = None,
) -> list[BenchRequest]:
    """n conversations of read_sharegpt's `pairs` in a seeded order (all of them if fewer): the
    first human turn as the prompt, the reply's length as max_tokens."""
    order = np.random.default_rng(seed).permutation(len(pairs))[:n]

    def count(text: str) -> int:
        return len(tokenizer.encode(text)) if tokenizer is not None else len(text.split())

    out = []
    for i in order:
        prompt, reply = pairs[i]
        o_len = max(1, count(reply))
        if max_output_len is not None:
            o_len = min(o_len, max_output_len)
        out.append(BenchRequest(prompt, count(prompt), o_len, exact=tokenizer is not None))
    return out
