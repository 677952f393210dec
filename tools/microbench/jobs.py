"""microbench, step 2: the sandbox jobs (one `microbench` timing job per shape, one
`reference` job for its spot-check). Nothing here judges; what a timing job returned is
parsed once, here, into a `TimingRun` (a malformed answer is an error) before anything
reads it as numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ...sandbox.job import Job, JobResult
from ...sandbox.worker.protocol import (
    OP_MICROBENCH,
    OP_REFERENCE,
    MicrobenchPayload,
    ReferencePayload,
)
from ..base import AgentError, ToolContext
from ..common.launch_config import LaunchConfigApplied, parse_applied
from ..common.recorded_code import JOB_INPUT_NAME
from .plan import Code
from .schema import MIN_TIMED_CALLS, TIMEOUT_BASE_S, TIMEOUT_PER_BUDGET


@dataclass(frozen=True)
class ArmTimes:
    samples_ns: tuple[int, ...]  # one per timed call, in call order
    minor_faults: int | None  # over the timed calls (the worker's getrusage); None: not reported


class SpotCall(NamedTuple):
    """A timed call whose outputs the worker saved for the spot-check."""

    arm: object  # the arm's name as the worker wrote it (compared, never trusted to be one)
    input_set: int  # -1 when unreadable
    iteration: object  # which timed call, for messages only
    file: str  # the saved outputs, in the job's out dir


@dataclass(frozen=True)
class TimingRun:
    """One shape's timing job: the worker's answer, parsed, and the sandbox's own facts."""

    arms: dict[str, ArmTimes]  # by arm name ("candidate", "baseline")
    warmup_calls: int  # untimed, per arm
    warmup_stable: bool
    stop_reason: str
    num_input_sets: int
    elapsed_ms: float | None
    spot_calls: tuple[SpotCall, ...]
    device: dict  # the worker's device fingerprint
    clocks: dict
    timer: str
    threads: int | None  # torch threads in the worker
    compiles: int  # Triton cache entries compiled: the sandbox's count, not the worker's
    out_dir: Path | None  # the saved outputs of the spot-checked calls
    node: str | None  # the cluster node it ran on (Placement.node_id); None: this host
    # by arm name, the arms that had a config (the worker's echo, for the answer only)
    launch_config_applied: dict[str, LaunchConfigApplied] = field(default_factory=dict)


async def time_shape(
    ctx: ToolContext,
    arms: list[Code],
    payload: MicrobenchPayload,
    shape: dict,
    index: int,
    count: int,
    inp,
) -> TimingRun:
    """Run the timing job for one shape; its answer, parsed."""
    timeout_s = timing_timeout_s(inp)
    label = ",".join(f"{k}={v}" for k, v in shape.items())

    async def progress(done: float, total: float | None = None, message: str = "") -> None:
        await ctx.progress(index + 0.5, count, f"shape {index + 1}/{count} ({label}): {message}")

    await ctx.progress(index, count, f"shape {index + 1}/{count} ({label}): timing")
    recorded = [
        a.snapshot for a in arms if a.snapshot is not None
    ]  # only the baseline may be a recorded one
    snapshots = {JOB_INPUT_NAME: recorded[0]} if recorded else {}
    res: JobResult = await ctx.sandbox.run(
        Job(
            op=OP_MICROBENCH,
            payload=payload,
            kind="timing",
            inputs=snapshots,
            timeout_s=timeout_s,
            triton_cache=f"{ctx.experiment_id}:timing",
        ),
        progress=progress,
    )  # one cache for this call's code under test, shapes share it
    if not res.ok:
        raise AgentError(_job_failure(res, shape, timeout_s, inp.budget_ms))
    node = res.placement.node_id if res.placement is not None else None
    run = _parsed(dict(res.result), arms, res.num_compiles, res.out_dir, node)
    _check_enough_calls(run, arms, shape, inp.max_budget_ms())
    return run


def timing_timeout_s(inp) -> float:
    """The timing job's limit: the agent's timeout_s, else derived from the budget (the
    harness stops sampling at the budget; past the limit a call never returned)."""
    if inp.timeout_s is not None:
        return inp.timeout_s
    return TIMEOUT_BASE_S + TIMEOUT_PER_BUDGET * inp.max_budget_ms() / 1e3


def _parsed(
    raw: dict, arms: list[Code], compiles: int, out_dir: Path | None, node: str | None
) -> TimingRun:
    try:
        return TimingRun(
            arms={a.name: _arm_times(raw["arms"][a.name]) for a in arms},
            warmup_calls=int(raw["warmup"]["calls_per_arm"]),
            warmup_stable=bool(raw["warmup"]["stable"]),
            stop_reason=str(raw["stop_reason"]),
            num_input_sets=int(raw["num_input_sets"]),
            elapsed_ms=float(raw["elapsed_ms"]) if raw.get("elapsed_ms") else None,
            spot_calls=tuple(
                _spot_call(c) for c in raw.get("spot_checks") or [] if isinstance(c, dict)
            ),
            device=dict(raw["device"]),
            clocks=dict(raw.get("clocks") or {}),
            timer=str(raw.get("timer", "")),
            threads=raw["threads"] if isinstance(raw.get("threads"), int) else None,
            compiles=compiles,
            out_dir=out_dir,
            node=node,
            launch_config_applied=_applied(raw.get("launch_config_applied"), arms),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AgentError(
            f"the timing job returned malformed data ({type(exc).__name__}: {exc}); "
            "did the code print to or tamper with the harness? Rerun; report if it persists"
        ) from None


def _applied(raw, arms: list[Code]) -> dict[str, LaunchConfigApplied]:
    by_arm = raw if isinstance(raw, dict) else {}
    parsed = {a.name: parse_applied(by_arm.get(a.name)) for a in arms if a.launch_config}
    return {name: applied for name, applied in parsed.items() if applied is not None}


def _arm_times(arm: dict) -> ArmTimes:
    samples = tuple(int(x) for x in arm["samples_ns"])
    if any(x <= 0 for x in samples):
        raise ValueError("non-positive time")
    faults = arm.get("minor_faults")
    return ArmTimes(samples_ns=samples, minor_faults=faults if isinstance(faults, int) else None)


def _spot_call(call: dict) -> SpotCall:
    try:
        input_set = int(call.get("input_set"))
    except (TypeError, ValueError):
        input_set = -1
    return SpotCall(
        arm=call.get("arm"),
        input_set=input_set,
        iteration=call.get("iteration"),
        file=str(call.get("file", "")),
    )


def _check_enough_calls(run: TimingRun, arms: list[Code], shape: dict, budget_ms: float) -> None:
    fewest = min(len(run.arms[a.name].samples_ns) for a in arms)
    if fewest >= MIN_TIMED_CALLS:
        return
    calls = (fewest + run.warmup_calls) * len(arms)
    per_call = (run.elapsed_ms or budget_ms) / max(calls, 1)
    # room for a warm-up of 2 windows and 4x the minimum timed calls, per arm
    suggest = per_call * len(arms) * (10 + 4 * MIN_TIMED_CALLS) / 0.75
    raise AgentError(
        f"only {fewest} timed calls fit in budget_ms={budget_ms:g} at {shape} (about "
        f"{per_call:.0f} ms per call); raise budget_ms to about {suggest:.0f} "
        "or use a smaller shape"
    )


def _job_failure(res: JobResult, shape: dict, timeout_s: float, budget_ms: float) -> str:
    error = (res.error or res.stderr_tail[-800:] or "no message").strip()
    if res.status == "timeout":
        return (
            f"the timing job at {shape} was killed at its {timeout_s:g} s limit (timeout_s; budget_ms="
            f"{budget_ms:g}): a call did not return in time, so nothing was timed (an endless loop, or one "
            "call far too slow at this size: the Triton interpreter on CPU is ~1000x slower than a GPU). "
            "Check the code with check_numerics, use smaller shapes, or raise timeout_s"
        )
    if "MemoryError" in error or "out of memory" in error.lower():
        return f"out of memory at {shape}: {error}. Use smaller shapes"
    if "raised on call" in error:
        return f"the code raised during timing at {shape}, so there is no timing: {error}"
    if res.status == "error":
        return (
            f"the timing job failed at {shape}: {error}. Check the code with check_numerics first"
        )
    return f"the timing job at {shape} ended '{res.status}': {error}"


async def run_spot_reference(ctx: ToolContext, payload: ReferencePayload, kernel_name: str) -> Path:
    """The reference's outputs for the spot-checked input sets; the folder holding them."""
    res = await ctx.sandbox.run(Job(op=OP_REFERENCE, kind="run", timeout_s=300.0, payload=payload))
    if not res.ok or res.out_dir is None:
        raise AgentError(
            f"the reference job for the spot-check failed ({res.status}: {res.error}); the spec's "
            f"reference for {kernel_name} needs fixing before anything can be timed against it"
        )
    return res.out_dir
