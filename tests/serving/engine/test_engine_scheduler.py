"""Scheduler and block manager, without torch: preemption, prefix-cache reuse and
eviction, chunked-prefill budgets, and no block leaked over 1,000 random lifecycles.

The token values a model would sample come from `drive` (the scheduler only cares that
a token arrives); everything else is the real scheduler and block manager."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from infra_agent.serving.engine.block_manager import BlockManager
from infra_agent.serving.engine.scheduler import Scheduler
from infra_agent.serving.engine.sequence import SamplingParams, Sequence, Status

EOS = 9999


def make(num_blocks=16, block_size=4, max_seqs=8, budget=32, chunked=True, prefix=True):
    return Scheduler(BlockManager(num_blocks, block_size, prefix), max_seqs, budget, chunked)


def seq(n_prompt, max_tokens=4, start=0):
    return Sequence(
        list(range(start, start + n_prompt)), SamplingParams(max_tokens=max_tokens, temperature=0)
    )


def step(s: Scheduler, token=7):
    batch = s.schedule()
    sampled = {b.seq.seq_id: token for b in batch if b.samples}
    s.postprocess(batch, sampled, [EOS], max_model_len=10_000)
    return batch


def run_to_end(s: Scheduler, limit=1000):
    for _ in range(limit):
        if not s.has_work():
            return
        step(s)
    raise AssertionError("the scheduler did not finish its work")


def assert_no_leak(s: Scheduler):
    bm = s.bm
    assert bm.num_free_blocks == len(bm.blocks)
    assert all(b.ref_count == 0 for b in bm.blocks)


def test_imports_no_torch():
    code = (
        "import sys; import infra_agent.serving.engine.scheduler, infra_agent.serving.engine.block_manager; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_chunked_prefill_respects_the_token_budget():
    s = make(budget=10)
    a, b = seq(25), seq(3, start=100)
    s.add(a), s.add(b)
    first = step(s)
    assert [(x.seq, x.num_tokens) for x in first] == [
        (a, 10)
    ]  # the budget is spent on a's first chunk
    second = step(s)
    assert [(x.seq, x.num_tokens) for x in second] == [(a, 10)]
    third = step(s)  # a's last 5 tokens (it samples), then b's whole prompt fits in the rest
    assert [(x.seq, x.num_tokens) for x in third] == [(a, 5), (b, 3)]
    assert a.num_output_tokens == 1 and b.num_output_tokens == 1
    fourth = step(s)  # both decode: one token each
    assert [x.num_tokens for x in fourth] == [1, 1]
    run_to_end(s)
    assert_no_leak(s)


def test_without_chunking_a_prompt_waits_for_a_step_with_room():
    s = make(budget=10, chunked=False)
    with pytest.raises(ValueError, match="without chunked prefill"):
        s.add(seq(11))
    a, b = seq(6), seq(6, start=50)
    s.add(a), s.add(b)
    assert [x.seq for x in step(s)] == [a]
    assert [(x.seq, x.num_tokens) for x in step(s)] == [(a, 1), (b, 6)]


def test_preemption_frees_the_latest_and_recomputes_it():
    s = make(num_blocks=6, block_size=4, budget=64)
    a, b = seq(8, max_tokens=12), seq(8, max_tokens=12, start=100)
    s.add(a), s.add(b)
    step(s)  # 2 + 2 blocks; both have 9 tokens -> each needs a third block soon
    preempted_seen = False
    for _ in range(40):
        if not s.has_work():
            break
        step(s)
        if s.num_preemptions and not preempted_seen:
            preempted_seen = True
            assert b in s.waiting and b.status is Status.WAITING and b.block_table == []
            assert a in s.running  # the earlier admitted keeps running
    assert preempted_seen
    assert a.num_output_tokens == 12 and b.num_output_tokens == 12
    assert a.finish_reason == b.finish_reason == "length"
    assert_no_leak(s)


def test_prefix_reuse_and_eviction():
    s = make(num_blocks=8, block_size=4, budget=64)
    a = seq(13, max_tokens=1)  # blocks 0-2 full after prefill
    s.add(a)
    run_to_end(s)
    assert_no_leak(s)  # freed, but the blocks keep their hashes
    b = seq(
        13, max_tokens=1
    )  # same prompt: 3 full blocks are reused (the last token is recomputed)
    s.add(b)
    first = step(s)
    assert first[0].num_tokens == 1 and s.num_prefix_cache_hits == 12
    run_to_end(s)
    c = seq(30, max_tokens=1, start=500)  # 8 blocks of other tokens evict every cached block
    s.add(c)
    run_to_end(s)
    d = seq(13, max_tokens=1)
    s.add(d)
    step(s)
    assert s.num_prefix_cache_hits == 12  # no new hit: a's blocks were evicted
    run_to_end(s)
    assert_no_leak(s)


def test_a_hash_hit_is_confirmed_by_the_tokens():
    s = make(num_blocks=8, block_size=4)
    s.add(seq(9, max_tokens=1))
    run_to_end(s)
    for block in s.bm.blocks:  # as if another prefix had hashed to the same value
        if block.hash is not None:
            block.tokens = tuple(t + 1 for t in block.tokens)
    s.add(seq(9, max_tokens=1))
    step(s)
    assert s.num_prefix_cache_hits == 0


def test_shared_blocks_are_reference_counted():
    s = make(num_blocks=16, block_size=4, budget=64)
    a = seq(9, max_tokens=5)
    s.add(a)
    step(s)  # a's first two blocks are now cached and in use
    b = seq(9, max_tokens=5)
    s.add(b)
    step(s)
    assert a.block_table[:2] == b.block_table[:2]
    assert [s.bm.blocks[i].ref_count for i in a.block_table[:2]] == [2, 2]
    s.finish(a, "abort")
    assert [s.bm.blocks[i].ref_count for i in b.block_table[:2]] == [1, 1]
    run_to_end(s)
    assert_no_leak(s)


def test_no_block_leaked_after_1000_random_lifecycles():
    rng = random.Random(12)
    s = make(num_blocks=24, block_size=4, max_seqs=12, budget=24)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(1, 14))] for _ in range(5)]
    seqs, added = [], 0
    while added < 1000 or s.has_work():
        for _ in range(rng.randrange(0, 4) if added < 1000 else 0):
            prompt = rng.choice(prefixes) + [
                rng.randrange(1000) for _ in range(rng.randrange(1, 20))
            ]
            sq = Sequence(
                prompt, SamplingParams(max_tokens=rng.randrange(1, 40), stop_token_ids=[3])
            )
            s.add(sq)
            seqs.append(sq)
            added += 1
        batch = s.schedule()
        assert sum(b.num_tokens for b in batch) <= 24 and len(s.running) <= 12
        sampled = {b.seq.seq_id: rng.choice([3, 5, 8, 13] * 20 + [EOS]) for b in batch if b.samples}
        s.postprocess(batch, sampled, [EOS], max_model_len=10_000)
        if s.running and rng.random() < 0.05:  # a client goes away mid-stream
            s.finish(rng.choice(s.running), "abort")
        assert sum(b.ref_count for b in s.bm.blocks) == sum(len(q.block_table) for q in s.running)
        assert all(not q.block_table for q in s.waiting)
        assert all(s.bm.blocks[i].ref_count == 0 for i in s.bm.free)
    assert all(q.is_finished for q in seqs)
    assert_no_leak(s)
    assert s.num_preemptions > 0 and s.num_prefix_cache_hits > 0  # both paths were exercised
