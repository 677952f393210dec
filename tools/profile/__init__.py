"""profile: where the time goes, on which thread, and what never overlaps what.

run() reads plan -> jobs -> judge -> report: the plan picks the target and builds the
job payload (pure); one sandbox job runs the target under torch.profiler and the range
recorder while the host watches its threads (/proc states, py-spy's GIL holder); the
judge turns raw events and host samples into op tables, per-thread times, overlaps and
GIL waits; the report writes the summary, a Perfetto trace and a timeline PNG.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from ..base import Tool, ToolContext
from ..common.expect import WithEvidence
from ..common.plot_thread import draw
from . import findings as find
from . import judge, report
from .expect_fields import EXPECT
from .jobs import check_result, run_profile_job, run_serve_window
from .plan import make_plan
from .schema import Input, Output

GPU_NOTE = (
    "kernel times from CUPTI; Nsight Compute speed-of-light and memory metrics are not collected by this "
    "tool yet (scripts/gpu_profile_check.py says whether this host lets ncu read the counters)"
)


async def run(inp: Input, ctx: ToolContext) -> WithEvidence:
    plan = make_plan(inp, ctx)
    traces: dict = {}
    with tempfile.TemporaryDirectory(prefix="infra-agent-profile-") as scratch:
        if plan.payload["target"] == "serve":
            raw, watch, traces = await run_serve_window(
                ctx,
                plan,
                sample=inp.sample_threads,
                gil_hz=inp.gil_sample_hz,
                scratch=Path(scratch),
            )
        else:
            result, watch = await run_profile_job(
                ctx,
                plan,
                sample=inp.sample_threads,
                gil_hz=inp.gil_sample_hz,
                scratch=Path(scratch),
            )
            raw = check_result(result, plan)
        # judging is CPU work over tens of thousands of events: off the event loop, so others get answers
        started = time.monotonic()
        out, ev, files = await asyncio.to_thread(_judged, inp, plan, raw, watch)
        watch.phases_ms["judge"] = 1e3 * (time.monotonic() - started)
    out.phases_ms = {k: round(v, 1) for k, v in watch.phases_ms.items()}
    out.artifacts = [ctx.artifact(name, data) for name, data in files]
    # the engine's own traces move into the artifacts: kept once, not also in the engine's folder
    out.artifacts += [ctx.artifact(name, path, move=True) for name, path in traces.items()]
    out.summary = report.summary(out)
    return WithEvidence(out, ev)  # expect's overlap_fraction() reads any pair from ev


def _judged(
    inp: Input, plan, raw: dict, watch
) -> tuple[Output, judge.Evidence, list[tuple[str, bytes | str]]]:
    ev = judge.evidence(raw, watch)
    judge.check_names(ev, plan.range_filters, "ranges")
    judge.check_names(ev, [p for pair in plan.overlap for p in pair], "overlap")
    by_self, by_total = judge.top_ops(raw.get("ops"), ev.window_ns, inp.top_k)
    overlaps = [judge.overlap(ev, a, b) for a, b in plan.overlap]
    contention = (
        find.contention(ev, watch, plan.overlap, inp.gil_sample_hz) if inp.sample_threads else None
    )
    stacks = judge.python_stacks(ev, watch.stacks)
    found = find.findings(ev, overlaps, contention, watch, raw, inp.sample_threads)
    found += find.interpreted_triton(ev, plan, by_self, stacks, watch)
    found += find.python_bound(ev, plan)
    ops_threads = sorted(
        {
            e.get("tid")
            for e in raw.get("op_events") or []
            if isinstance(e, dict) and isinstance(e.get("tid"), int)
        }
    )
    out = Output(
        target=plan.target,
        window_ms=ev.window_ns / 1e6,
        top_ops_by_self=by_self,
        top_ops_by_total=by_total,
        gpu_kernels=[k for k in raw.get("gpu_kernels") or [] if isinstance(k, dict)][: inp.top_k],
        gpu_note=GPU_NOTE
        if raw.get("cuda_activities")
        else "no GPU in this sandbox: CPU ops only (no CUPTI kernels)",
        ops_threads=ops_threads,
        ranges=judge.range_stats(ev, plan.range_filters),
        threads=judge.thread_stats(ev),
        overlaps=overlaps,
        contention=contention,
        findings=found,
        finding_codes=[f.code for f in found],
        python_stacks=stacks,
        load=plan.load,
        notes=list(inp._notes),
    )
    out.num_threads = len(out.threads)
    pid = int(raw.get("pid") or 0) if isinstance(raw.get("pid"), int) else 0
    files = [
        ("trace.perfetto.json", report.perfetto_trace(ev, raw.get("op_events"), pid)),
        ("timeline.png", draw(report.timeline_png, ev)),
    ]
    return out, ev, files


TOOL = Tool(
    name="profile",
    title="Profile a kernel or a workload: ops, threads, overlap, GIL",
    description=(
        "Where the time goes, on which thread, and what overlaps what. Targets: kernel= (a spec call on its "
        "inputs; impl= or source=/path=+entry=), or a workload: path=/source= + entry= (a function that runs one "
        "step of a stack and may start threads; it runs in the sandbox under the usual limits; mark phases with "
        "`from ia_worker.ranges import span` + `with span('dispatch'):` or torch.profiler.record_function). "
        "handle= (a running builtin or vllm engine from launch_serve: a window of duration_s under a load shaped like "
        "the workload under test, load_concurrency requests of load_input_len + load_output_len tokens, through "
        "its /start_profile and /stop_profile). Returns top ops by self and total time (torch.profiler, "
        "all threads, grouped by input shapes), per-thread wall time in ranges, on-CPU time and states, overlap "
        "between range sets (overlap=[['kv_transfer', 'dispatch|combine']]: merged-interval sweep over the time "
        "each range's thread made progress, i.e. was not blocked on a futex (the GIL, a lock) nor queued for a "
        "CPU), who held the GIL while whom waited (sampled from outside "
        "the job with py-spy and /proc), findings with the layer and the next cheapest experiment, and a Perfetto "
        "trace and a timeline PNG as artifacts."
    ),
    input_model=Input,
    output_model=Output,
    run=run,
    kernel_field="kernel",
    expect=EXPECT,
)
