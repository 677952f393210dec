"""The load generator: our own OpenAI-compatible streaming client, engine-agnostic.

    ep = Endpoint("http://127.0.0.1:8000", model="tiny")
    reqs = random_requests(64, input_len=32, output_len=16, tokenizer=tok)
    result = await run_benchmark(ep, reqs, Arrivals(rate=4.0, seed=1))
    result.metrics.ttft_ms.median

datasets.py (what to send) -> arrivals.py (when) -> client.py (one timed stream) ->
runner.py (all of them) -> metrics.py (vLLM's definitions, computed from timestamps).
"""

from .arrivals import Arrivals
from .client import Endpoint
from .datasets import (
    BenchRequest,
    PlainTokenizer,
    random_requests,
    read_sharegpt,
    shared_prefix_requests,
    sharegpt_requests,
)
from .metrics import TTFT_RULE, Distribution, Metrics, RequestRecord, compute
from .runner import MAX_IN_FLIGHT, RunResult, no_gc_pauses, run_benchmark, sleep_until

__all__ = [
    "Arrivals",
    "BenchRequest",
    "Distribution",
    "Endpoint",
    "PlainTokenizer",
    "Metrics",
    "RequestRecord",
    "RunResult",
    "TTFT_RULE",
    "compute",
    "no_gc_pauses",
    "random_requests",
    "run_benchmark",
    "read_sharegpt",
    "sharegpt_requests",
    "shared_prefix_requests",
    "sleep_until",
    "MAX_IN_FLIGHT",
]
