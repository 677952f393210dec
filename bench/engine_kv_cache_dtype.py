"""The error each KV-cache dtype introduces: greedy-token agreement of int8 and fp8 (e4m3)
caches against a bfloat16 and a float32 cache, on the seeded random model and on the
tests' tiny checkpoint (2 layers, hidden 64, weights ~N(0, 0.2): sharper, so more fragile).

    .venv/bin/python bench/engine_kv_cache_dtype.py [--prompts 16] [--max-tokens 32]

Agreement = matching tokens at the same position / all tokens (a sequence that diverges
once usually stays diverged, so this is close to "tokens until the first difference");
"first-token agreement" isolates the prefill's error.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from infra_agent.serving.engine import EngineArgs, SamplingParams
from infra_agent.serving.engine.llm_engine import LLMEngine
from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

WORDS = "the quick brown fox jumps over a lazy dog while paged caches store keys and values".split()


def tokens(args: EngineArgs, prompts, max_tokens) -> list[list[int]]:
    greedy = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    return [o["token_ids"] for o in LLMEngine(args).generate(prompts, greedy)]


def agreement(a, b) -> tuple[float, float]:
    same = sum(x == y for s, t in zip(a, b, strict=True) for x, y in zip(s, t, strict=True))
    return same / sum(map(len, a)), sum(s[0] == t[0] for s, t in zip(a, b, strict=True)) / len(a)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ns = ap.parse_args()
    prompts = [
        " ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(5 + 3 * i))
        for i in range(ns.prompts)
    ]
    tiny = str(build_tiny_checkpoint(tempfile.mkdtemp()))
    print(f"{'model':>14} {'cache':>6} {'vs':>9} {'token agreement':>16} {'first-token':>12}")
    for model, base in (("random", {}), ("tiny (tests)", {"checkpoint": tiny, "block_size": 8})):
        common = dict(num_blocks=2048, **base)
        refs = {
            dt: tokens(EngineArgs(dtype=dt, **common), prompts, ns.max_tokens)
            for dt in ("bfloat16", "float32")
        }
        for kind in ("int8", "fp8"):
            for ref_dtype, ref in refs.items():
                quant = tokens(
                    EngineArgs(dtype=ref_dtype, kv_cache_dtype=kind, **common),
                    prompts,
                    ns.max_tokens,
                )
                total, first = agreement(ref, quant)
                print(f"{model:>14} {kind:>6} {ref_dtype:>9} {total:>15.1%} {first:>12.1%}")
        total, first = agreement(refs["float32"], refs["bfloat16"])
        print(f"{model:>14} {'bf16':>6} {'float32':>9} {total:>15.1%} {first:>12.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
