"""How long a benchmark will take, from a short probe, before it runs.

An engine can be far slower than its user thinks (a Triton kernel interpreted on CPU ran a
default benchmark for 632 s without a word), so the call first times the engine on the
workload's shape and refuses when the estimate passes the caller's time budget.

The probe: one request of the workload's median shape alone (t1), then k of them sent
together (tk, k = min(4, the workload's concurrency)). A batch of b requests is taken to cost
W(b) = t1 + (b - 1) * (tk - t1) / (k - 1): flat for an engine that batches well, b * t1 for
one that serves requests one after another (an interpreted kernel runs each sequence's
program in turn). A repeat of N requests at concurrency c (max_concurrency, else all N)
then takes at least N * W(c) / c, and at least N / rate with a rate; warm-up requests go
one at a time (t1 each). Every repeat also pays its load generator's own cost outside the
engine's time (its process started and ended: 0.5-1 s here), as each probe did: the smaller of
the probes' is added per repeat. Without it a short run read 3x its estimate (0.7 s estimated,
2.1 s taken, on the planted slow engine). The call's estimate sums its repeats on every engine
measured.
When the single request already puts the floor past the budget (ceil(N / c) * t1 a repeat:
perfect batching), the call is refused without the second probe.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from dataclasses import dataclass

from ...serving.lifecycle import Engine
from ...serving.loadgen import Arrivals, Endpoint, random_requests
from ..base import AgentError
from .plan import Plan
from .schema import Workload

PROBE_BATCH = 4  # requests sent together in the second probe
PROBE_SEED = 2**31 + 7  # beyond the workload's seeds (0..2**31): no prefix-cache entry it uses


@dataclass(frozen=True)
class CostEstimate:
    single_s: float  # one request of the workload's median shape, alone, s
    batch: int  # requests sent together in the second probe (1: not sent)
    batch_s: float  # those requests, s (= single_s when batch is 1)
    repeat_s: float  # one repeat, warm-up and its load generator's own cost included, s
    lower_bound: bool = False  # repeat_s is a floor (one request alone already passed the budget)
    failed: int = 0  # probe requests that failed (the engine may have died: the caller checks)

    def describe(self) -> str:
        alone = f"one request alone took {self.single_s:.2f} s"
        if self.lower_bound:
            return (
                f"{alone}, so a repeat takes at least {self.repeat_s:.0f} s even if the engine "
                "batched its requests perfectly"
            )
        together = f", {self.batch} sent together {self.batch_s:.2f} s" if self.batch > 1 else ""
        return f"{alone}{together}; a repeat about {self.repeat_s:.0f} s"


async def probe(
    engine: Engine,
    ep: Endpoint,
    plan: Plan,
    work: Workload,
    *,
    repeats: int,
    budget_s: float,
    progress,
) -> CostEstimate:
    """Time `engine` on the workload's shape for `repeats` runs on it; an AgentError if even the
    probe runs past the budget. When the single request already puts the floor (perfect batching)
    past the budget, the batch probe is skipped and the floor returned."""
    n = len(plan.requests)
    input_len = round(statistics.median(r.prompt_tokens for r in plan.requests))
    output_len = round(statistics.median(r.max_tokens for r in plan.requests))
    concurrency = min(n, work.max_concurrency or n)
    batch = min(PROBE_BATCH, concurrency)
    requests = random_requests(
        batch, input_len, output_len, seed=PROBE_SEED, tokenizer=plan.tokenizer
    )
    deadline = time.monotonic() + budget_s
    then = f", then {batch} together" if batch > 1 else ""
    await progress(
        0,
        None,
        f"estimating the cost on {engine.handle}: one request of {input_len} "
        f"-> {output_len} tokens{then}",
    )
    single, failed, per_run = await _timed(
        engine, ep, requests[:1], deadline, budget_s, "one request"
    )
    paced = n / work.rate if work.rate else 0.0
    floor = max(single * math.ceil(n / concurrency), paced) + work.warmup * single + per_run
    if batch == 1 or failed or repeats * floor > budget_s:
        lower_bound = batch > 1 and not failed
        return CostEstimate(single, 1, single, floor, lower_bound, failed)
    together, failed, batch_per_run = await _timed(
        engine, ep, requests, deadline, budget_s, f"{batch} requests"
    )
    per_run = min(per_run, batch_per_run)
    steady = n * _wave_s(single, batch, together, concurrency) / concurrency
    repeat_s = max(steady, paced) + work.warmup * single + per_run
    return CostEstimate(single, batch, together, repeat_s, failed=failed)


def _wave_s(single_s: float, batch: int, batch_s: float, size: int) -> float:
    """Estimated time of `size` requests sent together, s: linear between the two probes."""
    if batch <= 1:
        return size * single_s  # nothing measured about batching: assume none
    return single_s + (size - 1) * max(0.0, (batch_s - single_s) / (batch - 1))


async def _timed(
    engine: Engine, ep: Endpoint, requests, deadline: float, budget_s: float, what: str
) -> tuple[float, int, float]:
    """(wall time of `requests` sent together, s; how many failed; the run's wall time outside
    it, s). The first is the load generator's own, first send to last chunk; the last is its
    process's start and end, not the engine's, which every repeat pays again."""
    started = time.monotonic()
    left = deadline - started
    try:
        result = await asyncio.wait_for(
            engine.run_load(ep, requests, Arrivals(), timeout_s=max(left, 1.0)),
            max(left, 0.001),
        )
    except asyncio.TimeoutError:
        raise AgentError(
            f"the cost probe ({what} of the workload's shape on {engine.handle}) did "
            f"not finish within time_budget_s={budget_s:g} s, so the benchmark "
            "would take far longer: raise time_budget_s to run it anyway, or make the "
            "engine faster first (its kernels, dtype) or the workload smaller "
            "(input_len, output_len)"
        ) from None
    outside_s = max(0.0, time.monotonic() - started - result.duration_s)
    return result.duration_s, sum(not r.ok for r in result.records), outside_s


def check(
    sides: list[CostEstimate], probes: dict[str, CostEstimate], repeats: int, budget_s: float
) -> float:
    """The call's estimated measurement time (`repeats` on each side), s; an AgentError past the
    budget."""
    total = repeats * sum(est.repeat_s for est in sides)
    if total > budget_s:
        per_engine = "; ".join(f"{handle}: {est.describe()}" for handle, est in probes.items())
        raise AgentError(
            f"this benchmark would take about {total:.0f} s ({repeats} repeat(s) a "
            f"side; {per_engine}), over time_budget_s={budget_s:g} s. Raise "
            "time_budget_s to run it anyway, or lower num_requests, output_len or "
            "repeats, or make the engine faster first (a kernel interpreted on CPU, "
            "e.g. kernels={'paged_attention_decode': 'triton'}, is very slow)"
        )
    return total
