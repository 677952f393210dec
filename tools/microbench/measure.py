"""microbench, steps 2a-2b for one shape: time it in a sandbox job, then spot-check the saved
outputs of a few timed calls against the reference recomputed from the same seeds. What a
shape's measurement yields travels as one `ShapeRun`; `judge` reads nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import anyio

from ..base import ToolContext
from ..common.tolerance import resolve_tolerance
from . import jobs, plan
from .jobs import TimingRun
from .plan import Bench


class SpotCheck(NamedTuple):
    """One arm's spot-check, as ArmResult's spot_check and spot_check_detail say it."""

    status: str  # passed | failed | skipped
    detail: str


@dataclass(frozen=True)
class ShapeRun:
    """One shape, measured."""

    shape: dict[str, int]
    index: int  # in the call's shapes: seeds the A/B bootstrap
    timing: TimingRun
    seeds: tuple[
        int, ...
    ]  # of the input sets (ours, from the plan; the spot-check's reference used them)
    spot_checks: dict[str, SpotCheck]  # by arm name


async def measure_shape(ctx: ToolContext, bench: Bench, index: int) -> ShapeRun:
    shape = bench.shapes[index]
    payload = plan.timing_payload(
        ctx, bench.kernel, bench.arms, shape, bench.dtype, index, bench.inp
    )
    timing = await jobs.time_shape(
        ctx, list(bench.arms), payload, shape, index, len(bench.shapes), bench.inp
    )
    seeds = tuple(payload["input_seeds"])
    checks = await _spot_check(ctx, bench, shape, timing, seeds)
    return ShapeRun(shape=shape, index=index, timing=timing, seeds=seeds, spot_checks=checks)


async def _spot_check(
    ctx: ToolContext, bench: Bench, shape: dict, timing: TimingRun, seeds: tuple[int, ...]
) -> dict[str, SpotCheck]:
    wanted, sets = plan.spot_check_calls(timing.spot_calls, bench.arms)
    ref_dir = None
    if wanted and timing.out_dir is not None:
        payload = plan.spot_reference_payload(ctx, bench.kernel, shape, bench.dtype, sets, seeds)
        ref_dir = await jobs.run_spot_reference(ctx, payload, bench.spec.name)
    tol = resolve_tolerance(bench.dtype, bench.spec.tolerances, None)
    return await anyio.to_thread.run_sync(
        _judge_spot_checks, bench.arms, wanted, sets, timing.out_dir, ref_dir, tol
    )


def _judge_spot_checks(*args) -> dict[str, SpotCheck]:
    from .spot_check import (
        judge_spot_checks,
    )  # torch: imported in the judge thread, not on the server's path

    return judge_spot_checks(*args)
