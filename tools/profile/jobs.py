"""profile's one side effect: run the profile job, and watch its threads from the host while it runs.

The job announces its pid (as a progress message) and waits ATTACH_WAIT_S before its
window starts; on that message we find its host pid in the sandbox's process tree and
start the samplers (sampler.py). They stop when the job ends, however it ends.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...sandbox.job import Job, JobResult
from ..base import AgentError, ToolContext
from .plan import Plan
from .sampler import ProcSampler, PySpy, host_pid_of


@dataclass
class Watch:
    """What the host saw of the job's threads; empty when sampling was off or failed."""

    proc: ProcSampler | None = None
    spy: PySpy | None = None
    gil_holders: dict[int, dict] = field(default_factory=dict)  # tid -> {"samples", "site"} from py-spy
    problem: str = ""  # why there are no samples, when there are none


async def run_profile_job(ctx: ToolContext, plan: Plan, *, sample: bool, gil_hz: int,
                          scratch: Path) -> tuple[JobResult, Watch]:
    watch = Watch()

    async def progress(done: float, total: float | None = None, message: str = "") -> None:
        match = re.match(r"profile:attach pid=(\d+)$", message or "")
        if match is None:
            await ctx.progress(done, total, message)
            return
        await ctx.progress(0.1, 1.0, "profiling")
        if sample and watch.proc is None:
            _attach(ctx, watch, int(match.group(1)), gil_hz, plan.timeout_s, scratch)

    job = Job(op="profile", payload=plan.payload, kind="run", timeout_s=plan.timeout_s, env=plan.env)
    try:
        result = await ctx.sandbox.run(job, progress)
    finally:
        await asyncio.to_thread(_stop, watch)
    if sample and watch.proc is None and not watch.problem:
        watch.problem = "the job ended before it announced its pid"
    return result, watch


def _attach(ctx: ToolContext, watch: Watch, job_pid: int, gil_hz: int, timeout_s: float, scratch: Path) -> None:
    zygote_pids = getattr(ctx.sandbox, "zygote_pids", None)
    candidates = zygote_pids() if zygote_pids is not None else []
    host_pid = host_pid_of(job_pid, candidates)
    if host_pid is None:
        watch.problem = (f"the job's pid {job_pid} is not in the sandbox's process tree as seen from the host "
                         "(no PID namespace, or the job lied); threads were not sampled from outside")
        return
    watch.proc = ProcSampler(host_pid)
    watch.proc.start()
    watch.spy = PySpy(host_pid, scratch / "py-spy.txt", gil_hz, timeout_s)


def _stop(watch: Watch) -> None:
    if watch.proc is not None:
        watch.proc.stop()
    if watch.spy is not None:
        watch.spy.stop()
        watch.gil_holders = watch.spy.holders()


def check_result(result: JobResult, plan: Plan) -> dict:
    """The job's raw result, or an AgentError that says what happened and what to do."""
    if result.status == "timeout":
        raise AgentError(f"{plan.target} did not return within timeout_s={plan.timeout_s:g} s; it and every "
                         "thread and process it started were killed. Make the entry run one bounded step "
                         "(join the threads it starts), or raise timeout_s")
    if result.status != "ok":
        text = result.error or result.status
        if "LoadError" in text or "has no function" in text:
            raise AgentError(f"could not load {plan.target}: {text}")
        raise AgentError(f"{plan.target} failed ({result.status}): {text}\n{result.stderr_tail[-1500:]}".rstrip())
    raw = result.result
    if not isinstance(raw.get("window"), dict) or not isinstance(raw.get("ranges"), dict):
        raise AgentError("the profile job returned a malformed result (did the code replace the worker's output?)")
    if raw.get("children"):
        raise AgentError(f"{plan.target} started child processes (pids {raw['children'][:5]} inside the sandbox) "
                         "that were still there when it returned: profile measures one process. Use threads, or "
                         "wait for the children inside the entry; they have been killed")
    return raw
