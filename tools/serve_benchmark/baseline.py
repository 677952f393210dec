"""What a serve_benchmark run is judged against, resolved once: an earlier experiment
(`baseline=`, its recorded numbers and requests) or a running engine measured alternately in
this call (`baseline_handle=`). Either way the rest of the tool reads one `Baseline`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..base import AgentError, ToolContext
from .judge import aggregate
from .schema import Input, RepeatMetrics


@dataclass(frozen=True)
class Baseline:
    # the names of Output.metrics: latencies in ms, throughputs per s, counts, fractions
    metrics: dict[str, float | None]  # median over the baseline's repeats
    spread: dict[str, list[float]]  # [min, max] over its repeats, same units
    records: (
        list[dict] | None
    )  # its last repeat's requests (requests.jsonl rows, ms): the latency plot
    source: str  # "experiment <id>" (measured earlier) or "handle <h>, alternating" (in this call)
    repeats: list[RepeatMetrics] = field(default_factory=list)  # measured in this call only


def recorded(inp: Input, ctx: ToolContext) -> Baseline | None:
    """The `baseline=` experiment's numbers, checked before anything runs; None without one."""
    if inp.baseline is not None and inp.baseline_handle is not None:
        raise AgentError(
            "give baseline= (an earlier experiment) or baseline_handle= (a running engine measured "
            "alternately in this call), not both"
        )
    if inp.baseline is None:
        return None
    row = ctx.experiment(inp.baseline)
    if (
        row is None
        or row.get("tool") != "serve_benchmark"
        or not (row.get("result") or {}).get("metrics")
    ):
        raise AgentError(
            f"baseline {inp.baseline!r} is not a successful serve_benchmark experiment; give the "
            "experiment_id an earlier serve_benchmark returned (list_experiments tool=serve_benchmark)"
        )
    result = row["result"]
    text = ctx.read_artifact(inp.baseline, "requests.jsonl")
    return Baseline(
        metrics=result["metrics"],
        spread=result.get("spread", {}),
        records=None if text is None else last_repeat(text),
        source=f"experiment {inp.baseline}",
    )


def measured(handle: str, repeats: list[RepeatMetrics], records_jsonl: str) -> Baseline:
    """The baseline engine's repeats of this call (`baseline_handle=`)."""
    metrics, spread = aggregate(repeats)
    return Baseline(
        metrics=metrics,
        spread=spread,
        records=last_repeat(records_jsonl),
        source=f"handle {handle}, alternating",
        repeats=repeats,
    )


def last_repeat(jsonl: str) -> list[dict]:
    """The rows of the last repeat in a requests.jsonl."""
    rows = [json.loads(line) for line in jsonl.splitlines() if line.strip()]
    last = max((r["repeat"] for r in rows), default=0)
    return [r for r in rows if r["repeat"] == last]
