"""The answer in words, the per-request records, and the latency plot (artifacts)."""

from __future__ import annotations

import json

from ...serving.loadgen import RequestRecord
from .schema import Output, Workload


def target(engine_label: str, work: Workload, repeats: int, launched: bool) -> str:
    """What ran, in words: the engine with its arguments, the workload's shape, the repeats."""
    started = " (started for this call)" if launched else ""
    return (
        f"{engine_label}{started}: {work.num_requests} requests x {repeats} repeat(s), "
        f"{_shape(work)}, {_arrivals(work)}, /v1/{work.api}"
    )


def _shape(work: Workload) -> str:
    spread = f" (+-{100 * work.range_ratio:.0f}%)" if work.range_ratio else ""
    if work.dataset == "random":
        return f"random prompts of {work.input_len} -> {work.output_len} tokens{spread}"
    if work.dataset == "shared_prefix":
        return (
            f"{work.num_prefixes} shared prefixes of {work.prefix_len} tokens + "
            f"{work.input_len} -> {work.output_len} tokens{spread}"
        )
    return f"ShareGPT prompts from {work.sharegpt_path}, at most {work.output_len} output tokens"


def _arrivals(work: Workload) -> str:
    cap = f", at most {work.max_concurrency} in flight" if work.max_concurrency else ""
    if work.rate is None and work.max_concurrency:
        return f"closed loop, {work.max_concurrency} in flight"
    if work.rate is None:
        return "all sent at once"
    gaps = "Poisson" if work.burstiness == 1 else f"gamma shape {work.burstiness:g}"
    return f"{work.rate:g} requests/s ({gaps}){cap}"


def summary(out: Output, baseline_source: str | None) -> str:
    m = out.metrics
    parts = [
        f"{out.target}: {int(m['completed'] or 0)} ok / {int(m['failed'] or 0)} failed per "
        f"run (median of {len(out.repeats)})"
    ]
    if out.first_error:
        parts[0] += f" (first error: {out.first_error})"
    for name, label in (
        ("ttft_p50", "TTFT p50"),
        ("tpot_p50", "TPOT p50"),
        ("itl_p50", "ITL p50"),
        ("e2el_p50", "E2EL p50"),
    ):
        if m.get(name) is not None:
            parts.append(f"{label} {m[name]:.3g} ms")
    if m.get("output_throughput") is not None:
        parts.append(f"{m['output_throughput']:.1f} output tok/s")
    text = ", ".join(parts)
    if out.criteria.conditions:
        text += f". Criteria: {_criteria_word(out.criteria.answer)}"
        failing = [c.condition for c in out.criteria.conditions if c.answer != "supported"]
        if failing:
            text += f" ({'; '.join(failing)})"
        if out.undecided:
            text += f"; {out.undecided[0].split(': ', 1)[1]}"
    if baseline_source and out.findings:
        text += f". vs {baseline_source}: {out.findings[0]}"
    return text


def _criteria_word(answer: str) -> str:
    return {
        "supported": "pass",
        "contradicted": "FAIL",
        "inconclusive": "inconclusive (the repeats straddle a threshold)",
    }.get(answer, answer)


def first_error(repeats_records: list[list[RequestRecord]]) -> str | None:
    """The first failed request's error, as the engine (or the client) put it."""
    for records in repeats_records:
        for r in records:
            if not r.ok:
                return r.error or "the stream ended without any generated text"
    return None


def records_jsonl(repeats_records: list[list[RequestRecord]]) -> str:
    lines = []
    for i, records in enumerate(repeats_records):
        for r in records:
            row = {
                "repeat": i,
                "index": r.index,
                "ok": r.ok,
                "error": r.error,
                "prompt_tokens": r.prompt_tokens,
                "output_tokens": r.output_tokens,
                "output_tokens_source": r.output_tokens_source,
            }
            if r.ok:
                row.update(
                    ttft_ms=1e3 * r.ttft_s,
                    e2el_ms=1e3 * r.e2el_s,
                    client_wait_ms=1e3 * r.client_wait_s,
                    tpot_ms=None if r.tpot_s is None else 1e3 * r.tpot_s,
                    itl_ms=[1e3 * g for g in r.itl_per_chunk_s()],
                )
            lines.append(json.dumps(row))
    return "\n".join(lines) + "\n"


def latency_series(candidate: list[RequestRecord], baseline: list[dict] | None) -> dict:
    """(TTFT ms, ITL ms) samples of this run's last repeat, and of the baseline's when there is one."""
    series = {
        "candidate": (
            [1e3 * r.ttft_s for r in candidate if r.ok],
            [1e3 * g for r in candidate if r.ok for g in r.itl_per_chunk_s()],
        )
    }
    if baseline:
        series["baseline"] = (
            [r["ttft_ms"] for r in baseline if r.get("ok")],
            [g for r in baseline if r.get("ok") for g in r.get("itl_ms", [])],
        )
    return series


def latency_png(series: dict) -> bytes:
    from ..common.plots import (
        latency_ecdf_png,
    )  # matplotlib: imported in the report thread, not on the server's path

    return latency_ecdf_png(series)
