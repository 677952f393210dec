"""Next tokens from logits: greedy, temperature, top-k, top-p, a seed per request.

A seeded request draws from a generator seeded with (seed, output position), so its
tokens do not depend on what else is in the batch, nor on preemption and recompute.
"""

from __future__ import annotations

import torch

from .sequence import SamplingParams


class Sampler:
    """`allowed_ids`: when given, only these ids are ever sampled (the others' logits are -inf)."""

    def __init__(self, seed: int = 0, allowed_ids: list[int] | None = None):
        self._unseeded = torch.Generator().manual_seed(seed)
        self._allowed = None if allowed_ids is None else torch.tensor(allowed_ids, dtype=torch.long)

    def sample(
        self, logits: torch.Tensor, params: list[SamplingParams], positions: list[int]
    ) -> list[int]:
        """logits [S, V] fp32; positions: each row's output index (0 = first token) -> S ids."""
        if self._allowed is not None:
            keep = torch.full_like(logits, float("-inf"))
            index = self._allowed.to(logits.device).expand(logits.shape[0], -1)
            logits = keep.scatter(1, index, logits.gather(1, index))
        greedy = logits.argmax(dim=-1).tolist()
        out = []
        for row, (p, pos) in enumerate(zip(params, positions, strict=True)):
            if p.temperature == 0 or p.top_k == 1:
                out.append(greedy[row])
                continue
            gen = (
                self._unseeded
                if p.seed is None
                else torch.Generator().manual_seed(hash((p.seed, pos)) & (2**63 - 1))
            )
            out.append(_sample_row(logits[row].cpu(), p, gen))
        return out


def _sample_row(logits: torch.Tensor, p: SamplingParams, gen: torch.Generator) -> int:
    logits = logits / p.temperature
    if p.top_k and p.top_k < logits.numel():
        kth = torch.topk(logits, p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if p.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        # drop a token when the tokens before it already cover top_p
        drop = sorted_probs.cumsum(-1) - sorted_probs > p.top_p
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=gen))
