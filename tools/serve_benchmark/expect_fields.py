"""What serve_benchmark's criteria and `expect` conditions may name: the run's latencies,
throughputs and engine phases, and with a baseline the same of the baseline's run.

Each metric is the median over repeats with the [min, max] over repeats as its interval, for this
run and for the baseline alike, so a criterion is decided only when the repeats of both agree
(`ttft_p50 <= 1.05 * baseline.ttft_p50` passes when this run's worst repeat is within 5% of the
baseline's best, fails when this run's best is over 5% above the baseline's worst, and is
inconclusive in between).
"""

from __future__ import annotations

from ..common.expect import Catalogue, ExpectFields, Facts, Measured
from .schema import LATENCIES, STATS, Input, Output

CATALOGUE = Catalogue(
    fields={
        **{
            f"{lat}_{s}": f"{lat.upper()} {s} over the run's requests, ms (median over repeats, [min, max] over "
            "repeats as its interval)"
            for lat in LATENCIES
            for s in STATS
        },
        "completed": "requests that streamed text",
        "failed": "requests that failed",
        "reconnected": "requests sent again on a fresh connection (the engine closed the idle one "
        "they first went out on, unanswered)",
        "request_throughput": "completed requests/s",
        "output_throughput": "output tokens/s",
        "total_token_throughput": "prompt + output tokens/s",
        "goodput": "requests/s meeting every SLO",
        "slo_attainment_pct": "share of requests meeting every SLO, %",
        "queue_ms": "engine: arrival to first scheduled, ms per request",
        "prefill_ms": "engine: first scheduled to first token, ms per request",
        "decode_ms": "engine: first to last token, ms per request",
        "kv_transfer_ms": "engine: prefill-to-decode KV hand-over, ms per request (disaggregated mode)",
        "engine_ttft_ms": "engine-side TTFT, ms per request: arrival to the first token the client can have "
        "(queue + prefill, + KV transfer in disaggregated mode)",
        "preemptions": "preemptions in the run",
        "prefix_cache_hit_rate": "prompt tokens found in the prefix cache, 0-1",
    }
)


def facts(inp: Input, out: Output, evidence: None) -> Facts:
    """This run's metrics and the baseline's, each with its [min, max] over repeats: a criterion is
    decided only when the two runs' spreads agree (serving numbers move between runs far more than
    a kernel's timings do: judged against the baseline's median alone, A/A failed 7 runs in 10 here)."""
    return Facts(
        fields=_measured(out.metrics, out.spread),
        baseline=None
        if out.baseline_metrics is None
        else Facts(fields=_measured(out.baseline_metrics, out.baseline_spread or {})),
    )


def _measured(metrics: dict, spread: dict) -> dict:
    return {
        k: (
            Measured(v, *spread[k])
            if v is not None and k in spread and spread[k][0] != spread[k][1]
            else v
        )
        for k, v in metrics.items()
    }


EXPECT = ExpectFields(CATALOGUE, facts)
