"""Time one or two implementations (candidate, baseline) on one shape: raw samples only.

Worker side of the microbench tool. The parent judges; this returns nanoseconds per
call, how the loop stopped, and the outputs of a few randomly chosen timed calls (in
out/) for the parent to check against the reference.

Integrity, in the order it matters:
- the clock is captured when this module is imported, before any candidate code;
- each call gets the next of several input sets (seeded by the parent, sized to
  overflow the last-level cache), so no call finds its inputs hot from the one before;
- with a baseline, calls are interleaved in pairs whose order is a coin flip, so drift
  and outside load hit both arms and neither always runs second;
- CUDA: the L2 is flushed before every call, and the whole device is synchronised
  before the end event, so work the candidate left on a side stream is counted;
- the spot-checked calls are drawn by reservoir sampling over the timed calls, so the
  candidate cannot know, when it returns, whether this output will be checked.

Payload::

    arms: [{"name", "entry", "source" | "path",       # 1 or 2; the first is the candidate
            "launch_config": {...} | None}]            # launch_config.py: each arm its own
    args, shape, dtype                                 # the kernel spec's inputs (see tensors.make_inputs)
    make_inputs: {"path", "entry"} | None              # the spec's custom generator, if any
    input_seeds: [int]                                 # one per input set (at most this many sets)
    budget_ms, target_rel_se, max_samples, num_spot_checks, order_seed, cuda_graph, cpu_threads
    min_timed_calls, max_budget_ms                     # time past budget_ms (up to max_budget_ms) until
                                                       # every arm has min_timed_calls timed calls
"""

from __future__ import annotations

import gc
import math
import random
import resource

import numpy as np

from ..context import JobContext
from ..protocol import MicrobenchPayload
from ..shared import median_rel_se, meminfo_bytes, ratio_decision
from ..timing import Arm, CpuTimer, CudaTimer, now_ns

# Captured before any candidate code is imported (the op module is imported first).
_now_ns = now_ns
_getrusage = resource.getrusage

MIN_SAMPLES = 10
# Racing's early stop (payload decide_margin) looks at the ratio's interval after every check, so
# the interval is wider than a 95% one (3 standard errors): repeated looks then seldom stop on
# noise. What the answer reports is the judge's bootstrap CI over every sample, not this.
DECIDE_Z = 3.0
MIN_DECIDE_CALLS = 5  # per arm, before the early stop is looked at (the judge's minimum)
WARMUP_WINDOW = 5  # calls per arm compared window against window
WARMUP_STABLE = 0.10  # a window's median within 10% of the previous one: warmed up
WARMUP_MAX_FRACTION = 0.25  # of the budget


def run(payload: MicrobenchPayload, ctx: JobContext) -> dict:
    import torch

    from ..launch_config import configured
    from ..loader import check_arity, load_entry
    from .peaks import cache_bytes, clocks, fingerprint

    device = ctx.device
    if device == "cpu":
        # One intra-op thread: on a shared CPU a parallel region waits for its slowest
        # thread, and one descheduled thread turns a 100 us call into a 30 ms one.
        torch.set_num_threads(int(payload.get("cpu_threads", 1)))
    info, clock = (
        fingerprint(device),
        clocks(device),
    )  # before candidate code: it cannot rewrite them
    timer = CudaTimer(torch, payload.get("flush_bytes")) if device == "cuda" else CpuTimer()

    sets, set_bytes = _input_sets(payload, ctx, device, cache_bytes(device))
    arms, applied = [], {}
    for arm in payload["arms"]:
        fn = load_entry(
            ctx,
            entry=arm["entry"],
            source=arm.get("source"),
            path=arm.get("path"),
            module_name=f"bench_{arm['name']}",
        )
        check_arity(fn, len(sets[0]), arm["entry"])
        fn, applied[arm["name"]] = configured(fn, arm.get("launch_config"))
        arms.append(Arm(arm["name"], fn, int(payload.get("num_spot_checks", 3))))
    if payload.get("cuda_graph"):
        if device != "cuda":
            raise ValueError("cuda_graph needs a CUDA device; this job runs on CPU")
        for arm in arms:
            arm.capture_graphs(torch, sets)

    budget_ns = float(payload["budget_ms"]) * 1e6
    rng = random.Random(int(payload.get("order_seed", 0)))
    gc.collect()  # a full collection can take long in a big heap: before the budget starts
    t_start = _now_ns()
    warmup = _warm_up(arms, sets, timer, t_start + WARMUP_MAX_FRACTION * budget_ns)
    ctx.progress(0.0, 1.0, f"warmed up after {warmup['calls_per_arm']} calls per arm; timing")

    last_ns = t_start + max(budget_ns, float(payload.get("max_budget_ms") or 0.0) * 1e6)
    stop_reason = _measure(arms, sets, timer, rng, payload, (t_start + budget_ns, last_ns), ctx)
    spot_checks = [check for arm in arms for check in arm.save_spot_checks(ctx)]
    return {
        "device": info,
        "clocks": clock,
        "num_input_sets": len(sets),
        "input_set_bytes": set_bytes,
        "warmup": warmup,
        "stop_reason": stop_reason,
        "elapsed_ms": (_now_ns() - t_start) / 1e6,
        "arms": {
            arm.name: {
                "samples_ns": arm.samples,
                "calls": arm.calls,
                "minor_faults": arm.minor_faults,
            }
            for arm in arms
        },
        "spot_checks": spot_checks,
        "launch_config_applied": {name: o.applied() for name, o in applied.items()},
        "timer": timer.description,
        "threads": torch.get_num_threads(),
    }


def _input_sets(payload: dict, ctx: JobContext, device: str, cache: int):
    """As many seeded input sets as it takes to overflow the cache twice (at least 2).

    Generated exactly as the reference op generates them (same function), so the
    parent can recompute the reference for any set from its seed alone.
    """
    from ..loader import load_entry
    from .reference import generate

    custom = payload.get("make_inputs")
    gen_fn = (
        load_entry(
            ctx,
            entry=custom["entry"],
            path=custom.get("path"),
            source=custom.get("source"),
            module_name="spec_inputs",
        )
        if custom
        else None
    )
    seeds = payload["input_seeds"]

    def make(seed: int):
        item = {"shape": payload["shape"], "dtype": payload["dtype"], "seed": seed}
        return generate(item, payload["args"], gen_fn, device)

    if gen_fn is None:  # refuse before the first allocation when the sizes are declared
        _check_memory(device, 3 * _declared_bytes(payload))
    first = make(seeds[0])
    set_bytes = sum(t.numel() * t.element_size() for t in first)
    wanted = max(2, math.ceil(2 * cache / max(set_bytes, 1)))
    count = min(wanted, len(seeds))
    _check_memory(device, set_bytes * (count + 1))  # + 1: outputs and temporaries
    sets = [first] + [make(s) for s in seeds[1:count]]
    return sets, set_bytes


def _declared_bytes(payload: dict) -> int:
    from ..tensors import dtype_of

    total = 0
    for arg in payload["args"]:
        dims = [d if isinstance(d, int) else payload["shape"][d] for d in arg["shape"]]
        total += math.prod(dims) * dtype_of(arg.get("dtype") or payload["dtype"]).itemsize
    return total


def _check_memory(device: str, need: int) -> None:
    """Refuse before allocating what the device does not have, with both numbers."""
    if device == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info()
    else:
        free = meminfo_bytes("MemAvailable")
    if free is not None and need > 0.9 * free:
        raise MemoryError(
            f"the input sets need {need / 2**30:.2f} GiB and the {device} has "
            f"{free / 2**30:.2f} GiB free: use smaller shapes"
        )


def _warm_up(arms, sets, timer, deadline_ns: float) -> dict:
    """Call every arm until the median of its last window matches the one before."""
    times: dict[str, list[int]] = {arm.name: [] for arm in arms}
    index = 0
    while True:
        for arm in arms:
            elapsed, _ = arm.call(timer, sets, index % len(sets))
            times[arm.name].append(elapsed)
            index += 1
        calls = len(times[arms[0].name])
        if calls >= 2 * WARMUP_WINDOW and all(_stable(t) for t in times.values()):
            return {"calls_per_arm": calls, "stable": True}
        if _now_ns() >= deadline_ns:
            return {"calls_per_arm": calls, "stable": False}


def _decided(arms, margin: float) -> bool:
    """Racing (sweep_kernel): the first arm's median / the second's is known to lie above 1, below
    1, or within `margin` of 1 (DECIDE_Z standard errors of the log-ratio, from each median's)."""
    first, second = (float(np.median(arm.samples)) for arm in arms)
    if first <= 0 or second <= 0:
        return False
    se = math.hypot(median_rel_se(arms[0].samples), median_rel_se(arms[1].samples))
    if not math.isfinite(se):
        return False
    low, high = first / second * math.exp(-DECIDE_Z * se), first / second * math.exp(DECIDE_Z * se)
    return ratio_decision(low, high, margin) is not None


def _stable(t: list[int]) -> bool:
    last = float(np.median(t[-WARMUP_WINDOW:]))
    prev = float(np.median(t[-2 * WARMUP_WINDOW : -WARMUP_WINDOW]))
    return prev > 0 and abs(last / prev - 1) < WARMUP_STABLE


def _measure(
    arms,
    sets,
    timer,
    rng: random.Random,
    payload: dict,
    deadlines_ns: tuple[float, float],
    ctx: JobContext,
) -> str:
    """Timed calls until the medians are known, the budget ends, or max_samples. At the budget's end an
    arm with fewer than min_timed_calls calls keeps the loop going, up to the last deadline: a slow call
    (the Triton interpreter) then still gets a median, not a refusal."""
    target = float(payload.get("target_rel_se", 0.005))
    max_samples = int(payload.get("max_samples", 50_000))
    min_calls = int(payload.get("min_timed_calls", 0))
    decide = payload.get("decide_margin")
    deciding = decide is not None and len(arms) == 2
    deadline_ns, last_ns = deadlines_ns
    extended = False  # the budget ran out before min_calls: timing went on
    pick = random.Random(rng.random())  # spot-check draws independent of the order flips
    index, iteration, next_check, next_progress = 0, 0, MIN_SAMPLES, 0
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside a timed call is noise that belongs to nobody
    try:
        while True:
            order = arms if len(arms) == 1 or rng.random() < 0.5 else arms[::-1]
            for arm in order:
                set_index = index % len(sets)
                faults = _getrusage(resource.RUSAGE_SELF).ru_minflt
                elapsed, outputs = arm.call(timer, sets, set_index)
                arm.minor_faults += _getrusage(resource.RUSAGE_SELF).ru_minflt - faults
                arm.samples.append(elapsed)
                t_offer = _now_ns()
                arm.offer(pick, iteration, set_index, outputs)
                # Copying a large output for the spot-check is bookkeeping, not the
                # candidate's time: it does not spend the budget (it is bounded:
                # reservoir sampling copies ~k * (1 + ln(n / k)) times in all).
                offered_ns = _now_ns() - t_offer
                deadline_ns, last_ns = deadline_ns + offered_ns, last_ns + offered_ns
                del outputs
                index += 1
            iteration += 1
            now = _now_ns()
            if now >= deadline_ns:
                if all(len(arm.samples) >= min_calls for arm in arms):
                    return "min_calls" if extended else "budget"
                if now >= last_ns:
                    return "budget"
                extended = True
            if iteration >= max_samples:
                return "max_samples"
            checking = iteration >= next_check
            if checking:
                next_check = iteration + max(MIN_SAMPLES, iteration // 10)
                if all(median_rel_se(arm.samples) < target for arm in arms):
                    return "target_se"
            # racing: also after every call from MIN_DECIDE_CALLS to the first check, so a ratio
            # far from 1 (a config 20x slower) costs five of its calls, not ten
            early = max(min_calls, MIN_DECIDE_CALLS) <= iteration < MIN_SAMPLES
            if deciding and (checking or early) and _decided(arms, float(decide)):
                return "decided"
            if now >= next_progress:
                next_progress = now + 250_000_000
                ctx.progress(iteration, None, f"{iteration} timed calls per arm")
                gc.collect(0)  # the young generation only: cheap, and outside any timed call
    finally:
        if gc_was_enabled:
            gc.enable()
