"""Streaming detokenisation: the engine's IncrementalDetokenizer (a short window per step)
against decoding the whole output every step (what it did before), on the same ids, in one run.

Per output length: microseconds per generated token for each, and full / incremental. Both
tokenizers the engine has: bytes (the random-weights model) and a byte-level BPE checkpoint
(the tiny checkpoint the tests build, made here in a temporary folder). The ids are a seeded
text with multi-byte characters, encoded, so both produce the same text (checked).

    python bench/detokenize.py [--lengths 256,1024,4096] [--reps 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint
from infra_agent.serving.engine.tokenizer import ByteTokenizer, HFTokenizer, IncrementalDetokenizer


class FullDecode:
    """The comparison: decode all ids every step, emit what grew (the engine's code before)."""

    def __init__(self, tokenizer):
        self._tokenizer, self.text = tokenizer, ""

    def update(self, ids: list[int], final: bool = False) -> str:
        full = self._tokenizer.decode(ids)
        if full.endswith("\ufffd") and not final:
            return ""
        delta, self.text = full[len(self.text) :], full
        return delta


def stream_us_per_token(cls, tokenizer, ids: list[int]) -> tuple[float, str]:
    detok, out = cls(tokenizer), []
    start = time.perf_counter()
    for i in range(
        1, len(ids) + 1
    ):  # a new list each step, as the engine's seq.output_token_ids is
        out.append(detok.update(ids[:i], final=i == len(ids)))
    return (time.perf_counter() - start) * 1e6 / len(ids), "".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="256,1024,4096", help="output lengths, tokens")
    ap.add_argument(
        "--reps", type=int, default=3, help="runs per cell, alternating the two; median reported"
    )
    args = ap.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_checkpoint(Path(tmp) / "tiny")
        tokenizers = {"bytes": ByteTokenizer(), "bpe": HFTokenizer(Path(tmp) / "tiny")}
        rng = random.Random(0)
        pieces = ["a", " ", "é", "日本", "🙂", "\n", "ok ", "token "]
        text = "".join(rng.choice(pieces) for _ in range(8 * max(lengths)))
        print("tokenizer  tokens  full decode us/token  incremental us/token  full / incremental")
        for name, tok in tokenizers.items():
            all_ids = tok.encode(text, add_special_tokens=False)
            for n in lengths:
                ids = all_ids[:n]
                full, inc = [], []
                for _ in range(args.reps):
                    us, text_full = stream_us_per_token(FullDecode, tok, ids)
                    full.append(us)
                    us, text_inc = stream_us_per_token(IncrementalDetokenizer, tok, ids)
                    inc.append(us)
                    assert text_full == text_inc == tok.decode(ids), "the two gave different text"
                f, i = statistics.median(full), statistics.median(inc)
                print(f"{name:9}  {n:6}  {f:20.1f}  {i:20.1f}  {f / i:17.1f}x", flush=True)


if __name__ == "__main__":
    main()
