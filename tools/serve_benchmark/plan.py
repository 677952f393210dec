"""What to send and when, from the workload and the engine's tokenizer (pure: runs nothing).

Each repeat sends prompts of its own, drawn from (seed, repeat index): the same prompts every
repeat turned repeats 2.. into prefix-cache hits (hit rate 0.03 in repeat 1, 0.75 after), and
the median over repeats into a warm-cache number. Seeded by the index, a baseline's repeat i
and this run's repeat i see the same prompts. `reuse_prompts` sends prompt set 0 in every
repeat (`Plan.draw_of`); the other sets then serve only a first repeat measured again, which must
find the cache as cold as the first did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ...serving.loadgen import (
    MAX_IN_FLIGHT,
    Arrivals,
    BenchRequest,
    PlainTokenizer,
    random_requests,
    read_sharegpt,
    shared_prefix_requests,
    sharegpt_requests,
)
from ..base import AgentError
from .schema import Workload


@dataclass(frozen=True)
class Plan:
    repeat_requests: list[list[BenchRequest]]  # prompt set i, drawn from repeat_seed(seed, i)
    arrivals: Arrivals
    slos_ms: dict[str, float]
    tokenizer: PlainTokenizer | None
    exact_lengths: bool
    # the warm-up before each prompt set: the workload's shape, prompts of their own (seeds no
    # repeat uses), so that no measured request finds its prompt in the prefix cache, and no
    # warm-up finds an earlier warm-up's
    warmup_requests: list[list[BenchRequest]]
    reuse_prompts: bool = False  # every repeat sends prompt set 0 (a cache-warm run)

    @property
    def requests(self) -> list[BenchRequest]:
        """The first repeat's requests."""
        return self.repeat_requests[0]

    def draw_of(self, repeat: int, fresh: int, again: bool = False) -> int:
        """The prompt set a measurement of repeat `repeat` (0-based) sends, where `fresh` is the
        set of its own it sends in a run of fresh prompts. With reuse_prompts every repeat sends
        set 0 (warm from the first), except the first measured `again`: set 0 is in the cache by
        then, and the first repeat is the cold one, so it sends a set of its own."""
        if self.reuse_prompts and not (repeat == 0 and again):
            return 0
        return fresh

    def requests_for(self, draw: int) -> list[BenchRequest]:
        return self.repeat_requests[draw]

    def warmup_for(self, draw: int) -> list[BenchRequest]:
        """What to send before requests_for(draw), excluded from the metrics."""
        return self.warmup_requests[draw]


def repeat_seed(seed: int, repeat: int) -> int:
    """The prompts' seed of repeat `repeat` (0-based): the workload's seed for the first; the
    warm-up before repeat i draws from repeat -1-i's."""
    return (seed + 1_000_003 * repeat) % (1 << 32)


def plan(
    work: Workload, tokenizer: PlainTokenizer | None, sharegpt_file: Path | None, repeats: int = 1
) -> Plan:
    draws = repeats  # with reuse_prompts, set 0 and the sets of a first repeat measured again
    conversations = _read_sharegpt(sharegpt_file) if work.dataset == "sharegpt" else None
    lists = [
        _requests(work, tokenizer, conversations, repeat_seed(work.seed, i)) for i in range(draws)
    ]
    arrivals = Arrivals(
        rate=work.rate or math.inf,
        burstiness=work.burstiness,
        max_concurrency=work.max_concurrency,
        seed=work.seed,
    )
    slos = {
        name: v
        for name, v in (
            ("ttft", work.slo_ttft_ms),
            ("tpot", work.slo_tpot_ms),
            ("e2el", work.slo_e2el_ms),
        )
        if v is not None
    }
    warmups = _warmups(work, tokenizer, conversations, lists)
    exact = all(r.exact for reqs in lists for r in reqs)
    return Plan(lists, arrivals, slos, tokenizer, exact, warmups, work.reuse_prompts)


def single_wave(work: Workload, durations_s: list[float]) -> list[str]:
    """single_wave, when every measured request is sent at once (no arrival rate) and all fit in
    flight together: a repeat is one burst, its percentiles the spread inside one batch (the
    last request of the wave waits for the others' prefills), not a steady state."""
    width = min(work.max_concurrency or work.num_requests, MAX_IN_FLIGHT)
    if work.rate is not None or work.num_requests > width:
        return []
    took = f", {sorted(durations_s)[len(durations_s) // 2]:.3g} s a repeat" if durations_s else ""
    return [
        f"single_wave: {work.num_requests} requests at {width} in flight ran as one wave{took}: "
        "every request started at once and none replaced another, so each repeat's percentiles "
        "describe one burst (TTFT's spread is the queue of one batch's prefills), not a steady "
        "load. Next: send several waves (num_requests at least 4x max_concurrency, e.g. "
        f"{4 * width}), or pace the arrivals with workload.rate"
    ]


def _warmups(
    work: Workload,
    tokenizer: PlainTokenizer | None,
    conversations: list[tuple[str, str]] | None,
    lists: list[list[BenchRequest]],
) -> list[list[BenchRequest]]:
    """The warm-up before each prompt set in `lists`: the workload's shape, prompts of their own
    (seeds no repeat uses; for ShareGPT, conversations no prompt set sends while the file has
    such), so that no measured request finds its prompt in the prefix cache."""
    if not work.warmup:
        return [[] for _ in lists]
    if conversations is not None:
        sent = {r.prompt for reqs in lists for r in reqs}
        conversations = [c for c in conversations if c[0] not in sent] or conversations
    shape = work.model_copy(update={"num_requests": work.warmup})
    return [
        _requests(shape, tokenizer, conversations, repeat_seed(work.seed, -1 - i))
        for i in range(len(lists))
    ]


def _read_sharegpt(sharegpt_file: Path | None) -> list[tuple[str, str]]:
    """The file's conversations, read once for every prompt set and warm-up."""
    if sharegpt_file is None:
        raise AgentError(
            "dataset 'sharegpt' needs workload.sharegpt_path, a ShareGPT-format JSON file in the "
            "workspace"
        )
    try:
        return read_sharegpt(sharegpt_file)
    except ValueError as exc:
        raise AgentError(str(exc)) from None


def _requests(
    work: Workload,
    tokenizer: PlainTokenizer | None,
    conversations: list[tuple[str, str]] | None,
    seed: int,
) -> list[BenchRequest]:
    if work.dataset == "random":
        return random_requests(
            work.num_requests,
            work.input_len,
            work.output_len,
            work.range_ratio,
            seed=seed,
            tokenizer=tokenizer,
        )
    if work.dataset == "shared_prefix":
        per_prefix = max(1, math.ceil(work.num_requests / work.num_prefixes))
        return shared_prefix_requests(
            work.num_prefixes,
            per_prefix,
            work.prefix_len,
            work.input_len,
            work.output_len,
            seed=seed,
            tokenizer=tokenizer,
        )[: work.num_requests]
    assert conversations is not None  # plan() read them for dataset 'sharegpt'
    # each repeat a different sample of the file's conversations (the same ones if it has too few)
    return sharegpt_requests(
        conversations, work.num_requests, tokenizer, seed=seed, max_output_len=work.output_len
    )
