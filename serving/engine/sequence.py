"""One request's state as the scheduler sees it: its tokens, how many are in the KV
cache, its blocks, and why it stopped. Torch-free."""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    max_tokens: int = 16  # completion tokens at most
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int | None = None  # per-request: the same seed gives the same tokens
    stop: list[str] = field(default_factory=list)  # stop strings (not included in the text)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 0")


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


_ids = itertools.count()


class Sequence:
    def __init__(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ):
        if not prompt_token_ids:
            raise ValueError("the prompt has no tokens")
        self.seq_id = next(_ids)
        self.request_id = request_id or f"seq-{self.seq_id}"
        self.params = params
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_computed_tokens = 0  # tokens whose K/V are in the cache
        self.num_cached_prompt_tokens = (
            0  # of those, how many came from the prefix cache (last admission)
        )
        self.num_hashed_blocks = 0  # full blocks already registered in the prefix cache
        self.block_table: list[int] = []
        self.status = Status.WAITING
        self.finish_reason: str | None = None  # "stop" (EOS or a stop string/token) or "length"
        self.num_preemptions = 0
        # timestamps (time.monotonic) for the per-phase metrics
        self.arrival_time = time.monotonic()
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = (
            None  # when the client can have it (disaggregated: adopted)
        )
        self.prefill_end_time: float | None = (
            None  # disaggregated: the prefill's first token (pre-transfer)
        )
        self.last_token_time: float | None = None
        self.finished_time: float | None = None

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def block_tokens(self, i: int, block_size: int) -> tuple[int, ...]:
        return tuple(self.token_ids[i * block_size : (i + 1) * block_size])
