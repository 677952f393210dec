"""Who runs this step, and how many tokens each. Torch-free.

Continuous batching with chunked prefill under one token budget per step: running
sequences go first (a decode costs one token, an unfinished prefill its next chunk),
then waiting ones are admitted in arrival order while budget, sequence slots and KV
blocks last. When a running sequence needs a block and none is free, the most recently
admitted running sequence is preempted: its blocks are freed and it goes back to the
front of the queue, to be recomputed (cheaply, when its prefix is still cached).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .block_manager import BlockManager
from .sequence import Sequence, Status


@dataclass
class ScheduledSeq:
    seq: Sequence
    num_tokens: int  # tokens computed this step, from seq.num_computed_tokens on

    @property
    def samples(self) -> bool:
        """True when this chunk reaches the sequence's last token: a new token is sampled."""
        return self.seq.num_computed_tokens + self.num_tokens == len(self.seq)


class Scheduler:
    def __init__(
        self,
        block_manager: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        enable_chunked_prefill: bool = True,
    ):
        self.bm = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_chunked_prefill = enable_chunked_prefill
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.num_prefix_cache_queries = 0  # prompt tokens looked up at admission
        self.num_prefix_cache_hits = 0  # of those, found in the cache

    def add(self, seq: Sequence) -> None:
        if not self.enable_chunked_prefill and len(seq) > self.max_num_batched_tokens:
            raise ValueError(
                f"the prompt has {len(seq)} tokens but a step takes at most "
                f"{self.max_num_batched_tokens} without chunked prefill"
            )
        if -(-len(seq) // self.bm.block_size) > len(self.bm.blocks):
            raise ValueError(
                f"the prompt needs more KV blocks than the cache has ({len(self.bm.blocks)})"
            )
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> list[ScheduledSeq]:
        budget = self.max_num_batched_tokens
        batch = self._schedule_running(budget)
        budget -= sum(s.num_tokens for s in batch)
        return batch + self._admit_waiting(budget)

    def _schedule_running(self, budget: int) -> list[ScheduledSeq]:
        batch: list[ScheduledSeq] = []
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_uncomputed_tokens, budget)
            while not self.bm.can_grow(seq, seq.num_computed_tokens + n):
                victim = self.running.pop()  # the most recently admitted
                self._preempt(victim)
                if victim is seq:
                    return batch
            self.bm.grow(seq, seq.num_computed_tokens + n)
            batch.append(ScheduledSeq(seq, n))
            budget -= n
            i += 1
        return batch

    def _admit_waiting(self, budget: int) -> list[ScheduledSeq]:
        batch: list[ScheduledSeq] = []
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            cached = self.bm.allocate_prefix(seq)
            n = seq.num_uncomputed_tokens
            if n > budget and not self.enable_chunked_prefill:
                self.bm.free_seq(seq)
                break
            n = min(n, budget)
            if not self.bm.can_grow(seq, seq.num_computed_tokens + n):
                self.bm.free_seq(seq)
                break
            self.bm.grow(seq, seq.num_computed_tokens + n)
            self.waiting.popleft()
            self.num_prefix_cache_queries += len(seq)
            self.num_prefix_cache_hits += cached
            seq.num_cached_prompt_tokens = cached
            seq.status = Status.RUNNING
            self.running.append(seq)
            batch.append(ScheduledSeq(seq, n))
            budget -= n
        return batch

    def adopt(self, seq: Sequence) -> None:
        """Take a sequence whose prompt K/V another engine computed (disaggregated decode):
        its blocks are allocated and filled, num_computed_tokens set by the caller."""
        assert seq.block_table and seq.num_computed_tokens > 0
        seq.status = Status.RUNNING
        self.running.append(seq)

    def _preempt(self, seq: Sequence) -> None:
        self.bm.free_seq(seq)
        seq.status = Status.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def postprocess(
        self,
        batch: list[ScheduledSeq],
        sampled: dict[int, int],
        eos_token_ids: list[int],
        max_model_len: int,
    ) -> list[Sequence]:
        """Account the computed tokens, append sampled tokens ({seq_id: token}), finish
        sequences on EOS, stop tokens, max_tokens or the context limit. Returns the
        sequences that got a new token."""
        updated = []
        for item in batch:
            seq = item.seq
            if seq.is_finished or seq.status is Status.WAITING:  # aborted or preempted meanwhile
                continue
            seq.num_computed_tokens += item.num_tokens
            self.bm.register_full_blocks(seq)
            if seq.seq_id not in sampled:
                continue
            token = sampled[seq.seq_id]
            seq.token_ids.append(token)
            updated.append(seq)
            p = seq.params
            if (not p.ignore_eos and token in eos_token_ids) or token in p.stop_token_ids:
                self.finish(seq, "stop")
            elif seq.num_output_tokens >= p.max_tokens or len(seq) >= max_model_len:
                self.finish(seq, "length")
        return updated

    def finish(self, seq: Sequence, reason: str) -> None:
        """Stop a sequence (also for stop strings and aborts) and free its blocks."""
        if seq.is_finished:
            return
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.bm.free_seq(seq)
        seq.status = Status.FINISHED
        seq.finish_reason = reason
