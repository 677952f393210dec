"""serve_benchmark's baseline, resolved once into a `Baseline` whichever source gave it: an
earlier experiment (checked before anything runs) or a running engine's repeats of this call."""

from __future__ import annotations

import json

import pytest

from infra_agent.tools.base import AgentError
from infra_agent.tools.serve_benchmark import baseline
from infra_agent.tools.serve_benchmark.judge import aggregate
from infra_agent.tools.serve_benchmark.schema import Input, RepeatMetrics

JSONL = "".join(
    json.dumps({"repeat": r, "index": i, "ok": True, "ttft_ms": 10.0 * r + i}) + "\n"
    for r in range(3)
    for i in range(2)
)


class Ledger:
    """The two ToolContext methods a recorded baseline reads."""

    def __init__(self, rows: dict, artifacts: dict):
        self.rows, self.artifacts, self.reads = rows, artifacts, []

    def experiment(self, experiment_id: str):
        return self.rows.get(experiment_id)

    def read_artifact(self, experiment_id: str, name: str):
        self.reads.append((experiment_id, name))
        return self.artifacts.get((experiment_id, name))


def _repeat(ttft_p50: float) -> RepeatMetrics:
    return RepeatMetrics(
        completed=4,
        failed=0,
        duration_s=1.0,
        request_throughput=4.0,
        output_throughput=40.0,
        total_token_throughput=80.0,
        latencies_ms={"ttft": {"median": ttft_p50}},
    )


def test_an_experiment_baseline_carries_its_numbers_records_and_source():
    result = {"metrics": {"ttft_p50": 12.0}, "spread": {"ttft_p50": [11.0, 13.0]}}
    ledger = Ledger(
        {"exp-1": {"tool": "serve_benchmark", "result": result}},
        {("exp-1", "requests.jsonl"): JSONL},
    )
    base = baseline.recorded(Input(handle="h", baseline="exp-1"), ledger)
    assert base == baseline.Baseline(
        metrics={"ttft_p50": 12.0},
        spread={"ttft_p50": [11.0, 13.0]},
        records=[json.loads(line) for line in JSONL.splitlines()[-2:]],
        source="experiment exp-1",
        device_fingerprint=None,  # the row names no device: no other_device finding either
    )
    assert base.repeats == []  # measured earlier: none in this call
    no_spread = Ledger(
        {"exp-2": {"tool": "serve_benchmark", "result": {"metrics": {"ttft_p50": 1.0}}}}, {}
    )
    old = baseline.recorded(Input(handle="h", baseline="exp-2"), no_spread)
    assert old.spread == {} and old.records is None  # an older result without them still judges
    assert baseline.recorded(Input(handle="h"), ledger) is None and ledger.reads == [
        ("exp-1", "requests.jsonl")
    ]


def test_a_baseline_that_cannot_be_one_is_refused_before_anything_runs():
    ledger = Ledger(
        {
            "exp-k": {"tool": "microbench", "result": {"metrics": {"x": 1.0}}},
            "exp-f": {"tool": "serve_benchmark", "result": None},
        },
        {},
    )
    for experiment in ("exp-k", "exp-f", "exp-missing"):
        with pytest.raises(AgentError, match="not a successful serve_benchmark experiment"):
            baseline.recorded(Input(handle="h", baseline=experiment), ledger)
    with pytest.raises(AgentError, match="not both"):
        baseline.recorded(Input(handle="h", baseline="exp-k", baseline_handle="h2"), ledger)
    assert ledger.reads == []


def test_a_live_baseline_is_its_repeats_aggregated():
    repeats = [_repeat(10.0), _repeat(14.0), _repeat(12.0)]
    base = baseline.measured("serve-2", "abcd0123abcd0123", repeats, JSONL)
    metrics, spread = aggregate(repeats)
    assert (base.metrics, base.spread) == (metrics, spread)
    assert base.metrics["ttft_p50"] == 12.0 and base.spread["ttft_p50"] == [10.0, 14.0]
    assert base.source == "handle serve-2, alternating" and base.repeats == repeats
    assert base.device_fingerprint == "abcd0123abcd0123"
    assert [r["repeat"] for r in base.records] == [2, 2]
