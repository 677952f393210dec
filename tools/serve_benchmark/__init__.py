"""serve_benchmark: how a serving stack performs under load, judged against a baseline,
and which engine phase moved.

plan (pure: the requests with exact token lengths, the arrival schedule, the SLOs) ->
jobs (start the engine if asked, run the workload `repeats` times through the load
generator, scrape the engine's /metrics around each run) -> judge (median and spread
over repeats, acceptance criteria in the expect language, per-phase attribution against
the baseline) -> report (summary, per-request records, latency plot).
"""

from __future__ import annotations

import asyncio
import time

from ...serving.adapters import EngineArgs
from ..base import AgentError, Tool, ToolContext
from ..common import expect
from ..common.engines import engine_label, engine_tokenizer, live_engine, start_engine
from ..common.plot_thread import draw_async
from . import baseline, engine_truth, jobs, plan, report, undecided
from .expect_fields import CATALOGUE, EXPECT
from .judge import aggregate, attribution, latency_table
from .schema import Input, Output


async def run(inp: Input, ctx: ToolContext) -> Output:
    expect.check(
        inp.criteria,
        CATALOGUE,
        has_baseline=inp.baseline is not None or inp.baseline_handle is not None,
    )
    recorded = baseline.recorded(inp, ctx)  # checked before any engine starts
    base_engine = live_engine(ctx, inp.baseline_handle) if inp.baseline_handle else None
    work = inp.workload
    sharegpt = (
        ctx.workspace.file(work.sharegpt_path) if work.sharegpt_path else None
    )  # before any start
    engine, launched = await _engine(inp, ctx)
    try:
        # an A/A on one handle: the baseline side draws prompts of its own (jobs.run_repeats)
        same = base_engine is not None and base_engine.handle == engine.handle
        sides = 1 + (base_engine is not None)
        # on a thread: thousands of prompts of exact token lengths take seconds (2.7 s for 3 draws
        # of 2,000 on this host), and the server's other calls answer meanwhile (issue 36)
        the_plan = await asyncio.to_thread(
            plan.plan,
            work,
            engine_tokenizer(engine),
            sharegpt,
            repeats=jobs.prompt_draws(inp.repeats, sides, same),
        )
        estimate_s = await jobs.estimate_cost(
            engine,
            base_engine,
            the_plan,
            work,
            repeats=inp.repeats,
            budget_s=inp.time_budget_s,
            progress=ctx.progress,
        )
        started = time.monotonic()

        async def progress(done, total, message):  # how far it is, in time too
            elapsed = time.monotonic() - started
            await ctx.progress(
                done, total, f"{message}; {elapsed:.0f} s of about {estimate_s:.0f} s estimated"
            )

        runs = await jobs.run_repeats(
            engine,
            the_plan,
            api=work.api,
            ignore_eos=work.ignore_eos,
            repeats=inp.repeats,
            timeout_s=inp.timeout_s,
            progress=progress,
            baseline=base_engine,
        )
        elapsed_s = time.monotonic() - started
        for eng, side in ((engine, runs.this), (base_engine, runs.baseline)):
            if eng is not None and eng.placement is not None:
                for _ in side:  # each repeat's load ran on the engine's node
                    ctx.ran_on(eng.placement)
    finally:
        if launched:
            await ctx.engines.stop(
                engine.handle, how="when the serve_benchmark that started it ended"
            )
    base = recorded
    if base_engine is not None:
        base_jsonl = report.records_jsonl([r.result.records for r in runs.baseline])
        base_rows = [r.metrics for r in runs.baseline]
        device = baseline.engine_device(base_engine)
        base = baseline.measured(base_engine.handle, device, base_rows, base_jsonl)
    repeats = runs.this
    rows = [r.metrics for r in repeats]
    metrics, spread = aggregate(rows)
    sources = {r.result.metrics.output_tokens_source for r in repeats}
    out = Output(
        handle=engine.handle,
        engine=engine.adapter.name,
        metrics=metrics,
        spread=spread,
        repeats=rows,
        latencies=latency_table(metrics, spread),
        output_tokens_source=sources.pop() if len(sources) == 1 else "mixed",
        target=report.target(
            engine_label(engine.adapter.name, engine.handle, engine.args, engine.node),
            inp.workload,
            inp.repeats,
            launched,
        ),
        first_error=report.first_error([r.result.records for r in repeats]),
        estimated_s=round(estimate_s, 1),
        elapsed_s=round(elapsed_s, 1),
    )
    out.device_fingerprint = baseline.engine_device(engine)
    if base is not None:
        out.baseline_metrics, out.baseline_spread = base.metrics, base.spread
        out.baseline_source, out.baseline_repeats = base.source, list(base.repeats)
        out.baseline_device_fingerprint = base.device_fingerprint
        focus = " ".join(
            inp.criteria + (inp.expect or [])
        )  # the metrics the caller asked about come first
        out.phases, out.findings = attribution(
            metrics, base.metrics, focus=focus, spread=spread, base_spread=base.spread
        )
        out.findings += baseline.other_device_finding(out.device_fingerprint, base)
        out.findings += baseline.cache_warmth_finding(metrics, base)
    out.prefix_cache_hit_rates = [r.phases_ms.get("prefix_cache_hit_rate") for r in rows]
    # the harness checks its own numbers: client vs engine (on both sides), the cache across repeats
    out.findings += engine_truth.findings(rows, work.reuse_prompts, work.dataset)
    if base_engine is not None:
        out.findings += engine_truth.findings(
            base_rows, work.reuse_prompts, work.dataset, whose="the baseline engine"
        )
    out.findings += plan.single_wave(work, [r.duration_s for r in rows])
    out.remeasured = runs.remeasured
    out.findings += [engine_truth.remeasured_finding(r) for r in runs.remeasured]
    out.criteria = expect.answer(inp.criteria, EXPECT, inp, out)  # the language and facts of expect
    out.undecided = undecided.explain(out.criteria, inp.workload.num_requests)
    if not the_plan.exact_lengths:
        out.findings.append(
            "prompt lengths are approximate ("
            + (
                "shared_prefix joins each prefix and suffix as text, and the tokenizer may "
                "merge tokens where they meet"
                if work.dataset == "shared_prefix" and the_plan.tokenizer is not None
                else "no tokenizer.json for this model"
            )
            + ")"
        )
    records = [r.result.records for r in repeats]
    ctx.artifact("requests.jsonl", report.records_jsonl(records))
    if base_engine is not None:
        ctx.artifact("baseline_requests.jsonl", base_jsonl)
    series = report.latency_series(records[-1], base.records if base is not None else None)
    ctx.artifact("latency.png", await draw_async(report.latency_png, series))
    ctx.artifact("engine.log", engine.log_tail(200_000))
    out.summary = report.summary(out, out.baseline_source)
    return out


async def _engine(inp: Input, ctx: ToolContext):
    if inp.handle and inp.engine:
        raise AgentError(
            "give handle= (a running engine) or engine= (start one for this benchmark), not both"
        )
    if inp.handle:
        if inp.args != EngineArgs():
            raise AgentError(
                "args= configures an engine this call starts (engine=); a running engine keeps the "
                "arguments it was launched with: drop args=, or launch_serve a new engine with them"
            )
        return live_engine(ctx, inp.handle), False
    if inp.engine:
        return await start_engine(
            ctx,
            inp.engine,
            inp.args,
            ready_timeout_s=inp.ready_timeout_s,
            resources=inp.resources,
        ), True
    raise AgentError(
        "name the engine: handle= from launch_serve, or engine= with args= to start one for this call"
    )


TOOL = Tool(
    name="serve_benchmark",
    title="Load-test a serving engine",
    description="Load-test an OpenAI-compatible serving engine (a launch_serve handle, or engine= to start one) "
    "with vLLM's metric definitions (TTFT at the first content chunk, TPOT, ITL per chunk and per token, E2EL, "
    "throughput, goodput under SLOs; timers from the scheduled send time), over `repeats` runs; judge "
    "acceptance criteria such as 'ttft_p50 <= 1.05 * baseline.ttft_p50' against a baseline (an earlier "
    "experiment, or baseline_handle: a running engine measured alternately in this call) with the spread over "
    "repeats, and say which engine phase moved (queue, prefill, decode, KV transfer, from the "
    "engine's /metrics) and what to try next. Criteria and expect may name: " + CATALOGUE.listing(),
    input_model=Input,
    output_model=Output,
    run=run,
    read_only=False,
    expect=EXPECT,
)
