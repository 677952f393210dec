"""What to send and when, from the workload and the engine's tokenizer (pure: runs nothing)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ...serving.loadgen import (
    Arrivals,
    BenchRequest,
    PlainTokenizer,
    random_requests,
    shared_prefix_requests,
    sharegpt_requests,
)
from ..base import AgentError
from .schema import Workload


@dataclass(frozen=True)
class Plan:
    requests: list[BenchRequest]
    arrivals: Arrivals
    slos_ms: dict[str, float]
    tokenizer: PlainTokenizer | None
    exact_lengths: bool


def plan(work: Workload, tokenizer: PlainTokenizer | None, sharegpt_file: Path | None) -> Plan:
    if work.dataset == "random":
        requests = random_requests(work.num_requests, work.input_len, work.output_len, work.range_ratio,
                                   seed=work.seed, tokenizer=tokenizer)
    elif work.dataset == "shared_prefix":
        per_prefix = max(1, math.ceil(work.num_requests / work.num_prefixes))
        requests = shared_prefix_requests(work.num_prefixes, per_prefix, work.prefix_len, work.input_len,
                                          work.output_len, seed=work.seed, tokenizer=tokenizer)[:work.num_requests]
    else:
        if sharegpt_file is None:
            raise AgentError("dataset 'sharegpt' needs workload.sharegpt_path, a ShareGPT-format JSON file in the "
                             "workspace")
        try:
            requests = sharegpt_requests(sharegpt_file, work.num_requests, tokenizer, seed=work.seed,
                                         max_output_len=work.output_len)
        except ValueError as exc:
            raise AgentError(str(exc)) from None
    arrivals = Arrivals(rate=work.rate or math.inf, burstiness=work.burstiness, max_concurrency=work.max_concurrency,
                        seed=work.seed)
    slos = {name: v for name, v in (("ttft", work.slo_ttft_ms), ("tpot", work.slo_tpot_ms),
                                    ("e2el", work.slo_e2el_ms)) if v is not None}
    return Plan(requests, arrivals, slos, tokenizer, all(r.exact for r in requests))
