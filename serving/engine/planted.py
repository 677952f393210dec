"""A planted regression for tests and benches (tests/serving/tools, bench/serve_criteria_flips.py):
`--prefill-delay-ms N` (EngineArgs.prefill_delay_ms) sleeps N ms per prefill chunk after the
model ran, inside the step's prefill range, so TTFT and the prefill phase move and nothing else.

It wraps the model runner rather than living in `LLMEngine.step`, which stays the algorithm.
"""

from __future__ import annotations

import time

from .config import EngineArgs, ModelConfig
from .model_runner import ModelRunner
from .scheduler import ScheduledSeq


class PrefillDelayRunner(ModelRunner):
    """A ModelRunner whose every batch takes `prefill_delay_ms` longer per prefill chunk."""

    def __init__(self, args: EngineArgs, config: ModelConfig):
        super().__init__(args, config)
        self.delay_s = args.prefill_delay_ms / 1e3

    def run(self, batch: list[ScheduledSeq]) -> dict[int, int]:
        sampled = super().run(batch)
        num_prefill_chunks = sum(item.num_tokens > 1 for item in batch)
        if num_prefill_chunks:
            time.sleep(self.delay_s * num_prefill_chunks)
        return sampled


def model_runner(args: EngineArgs, config: ModelConfig) -> ModelRunner:
    """The engine's runner: the plain one unless a prefill delay is planted."""
    return PrefillDelayRunner(args, config) if args.prefill_delay_ms else ModelRunner(args, config)
