"""The paged KV cache's bookkeeping: which block holds which tokens, who uses it, and
which full blocks can be reused by a later prompt with the same prefix. Torch-free.

A full block's hash covers its tokens and the previous block's hash, so equal hashes mean
equal prefixes (a hit is still confirmed by comparing the tokens). A block nobody uses
goes back to the free list but keeps its hash until it is reallocated: that is the
prefix cache, evicted least recently freed first.
"""

from __future__ import annotations

from collections import OrderedDict

from .sequence import Sequence


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "tokens")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None
        self.tokens: tuple[int, ...] = ()


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict(
            (i, None) for i in range(num_blocks)
        )  # LRU order
        self.hash_to_block: dict[int, int] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (vLLM's kv_cache_usage_perc), 0..1."""
        return 1.0 - len(self.free) / len(self.blocks)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        return max(0, -(-num_tokens // self.block_size) - len(seq.block_table))

    # -- admission: reuse cached prefix blocks ---------------------------------------
    def allocate_prefix(self, seq: Sequence) -> int:
        """Give a sequence without blocks the cached blocks of its longest cached prefix;
        returns the number of tokens they hold. The last token is never taken from the
        cache: its logits are needed."""
        assert not seq.block_table
        if not self.enable_prefix_caching:
            return 0
        h = None
        for i in range((len(seq) - 1) // self.block_size):
            tokens = seq.block_tokens(i, self.block_size)
            h = hash((h, tokens))
            block_id = self.hash_to_block.get(h)
            if block_id is None or self.blocks[block_id].tokens != tokens:
                break
            self._take(block_id)
            seq.block_table.append(block_id)
        seq.num_hashed_blocks = len(seq.block_table)
        seq.num_computed_tokens = len(seq.block_table) * self.block_size
        return seq.num_computed_tokens

    def _take(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free[block_id]
        block.ref_count += 1

    # -- growth -------------------------------------------------------------------------
    def can_grow(self, seq: Sequence, num_tokens: int) -> bool:
        return self.blocks_needed(seq, num_tokens) <= len(self.free)

    def grow(self, seq: Sequence, num_tokens: int) -> None:
        """Enough blocks for the sequence's first `num_tokens` tokens (check can_grow first)."""
        for _ in range(self.blocks_needed(seq, num_tokens)):
            block_id, _ = self.free.popitem(
                last=False
            )  # least recently freed: evict its cached prefix
            block = self.blocks[block_id]
            if block.hash is not None and self.hash_to_block.get(block.hash) == block_id:
                del self.hash_to_block[block.hash]
            block.hash, block.tokens, block.ref_count = None, (), 1
            seq.block_table.append(block_id)

    def register_full_blocks(self, seq: Sequence) -> None:
        """After a step: make the blocks that just became full (and computed) reusable."""
        if not self.enable_prefix_caching:
            return
        num_full = seq.num_computed_tokens // self.block_size
        h = (
            self.blocks[seq.block_table[seq.num_hashed_blocks - 1]].hash
            if seq.num_hashed_blocks
            else None
        )
        for i in range(seq.num_hashed_blocks, num_full):
            tokens = seq.block_tokens(i, self.block_size)
            h = hash((h, tokens))
            block = self.blocks[seq.block_table[i]]
            block.hash, block.tokens = h, tokens
            self.hash_to_block[h] = block.block_id
        seq.num_hashed_blocks = max(seq.num_hashed_blocks, num_full)

    # -- release ------------------------------------------------------------------------
    def free_seq(self, seq: Sequence) -> None:
        """Release a sequence's blocks. Tail blocks are freed first, so they are evicted
        before the shared prefix blocks that more prompts are likely to reuse."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            assert block.ref_count >= 0, f"block {block_id} freed twice"
            if block.ref_count == 0:
                self.free[block_id] = None
        seq.block_table = []
        seq.num_computed_tokens = 0
        seq.num_hashed_blocks = 0
