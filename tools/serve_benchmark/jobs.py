"""Running the workload against an engine: repeats, each between two scrapes of /metrics.

The load generator runs where the engine runs (Engine.run_load): in a process of its own for an
engine on the server's host (the server's loop relays its progress), on its node for one a
cluster runs; it reaches the sandboxed engine
through its bridge socket, and its records come back to the judge here. Nothing the engine says
is trusted beyond being measured.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from ...sandbox import CpuAccount
from ...serving.lifecycle import Engine
from ...serving.loadgen import Endpoint, RunResult
from ..base import AgentError
from . import cost
from .engine_truth import disagreement, engine_side
from .judge import repeat_metrics
from .phases import FINISHED, parse, window
from .plan import Plan
from .schema import EngineCpu, RemeasuredRepeat, RepeatMetrics, Workload


@dataclass
class Repeat:
    result: RunResult  # the load generator's records
    metrics: RepeatMetrics  # its numbers, the client's and the engine's own


@dataclass
class Runs:
    """What run_repeats measured: each side's repeats in order, and those measured again."""

    this: list[Repeat]
    baseline: list[Repeat]
    remeasured: list[RemeasuredRepeat]


def remeasure_limit(repeats: int) -> int:
    """How many of one side's repeats may be measured again: one up to three repeats, half of them
    beyond. More disagreeing than that is the setup, not a moment, and the findings say so."""
    return max(1, repeats // 2)


def prompt_draws(repeats: int, sides: int, same: bool) -> int:
    """How many prompt sets run_repeats may send: one per repeat (per side on an A/A), and one for
    each repeat it may measure again, so that no measurement finds earlier prompts in the cache."""
    return repeats * (1 + same) + remeasure_limit(repeats) * sides


# How long an engine may take to answer /v1/models: a busy one answers late, not never (a
# cancelled profile window's export held the built-in engine's GIL past 10 s beside two CPU hogs,
# and the next call read that as "no model listed")
MODELS_TIMEOUT_S = 120.0


def _liveness(engine: Engine) -> str:
    """The engine's state in words, for an error that waited on it."""
    return "alive" if engine.alive else f"no longer running ({engine.death_cause()})"


async def served_model(engine: Engine) -> str:
    if engine.args.served_model_name:
        return engine.args.served_model_name
    async with engine.client(timeout_s=MODELS_TIMEOUT_S) as client:
        try:
            data = (await client.get("/v1/models")).json()
            return data["data"][0]["id"]
        except httpx.TimeoutException:
            state = _liveness(engine)
            raise AgentError(
                f"the {engine.adapter.name} engine did not answer /v1/models within "
                f"{MODELS_TIMEOUT_S:g} s (it is {state}: busy or stalled, e.g. exporting a "
                "profile's trace); try again when it is idle, or pass args.served_model_name; "
                f"{engine.log_excerpt(1500)}"
            ) from None
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            raise AgentError(
                f"the {engine.adapter.name} engine did not list its model at /v1/models; pass "
                f"args.served_model_name; {engine.log_excerpt(1500)}"
            ) from None


async def run_repeats(
    engine: Engine,
    plan: Plan,
    *,
    api: str,
    ignore_eos: bool,
    repeats: int,
    timeout_s: float,
    progress,
    baseline: Engine | None = None,
) -> Runs:
    """`repeats` runs on `engine`; with a baseline engine, as many on it, alternating A B B A A B ...
    (each pair in both orders, so a steady drift of the machine lands on both sides alike).

    A repeat whose client numbers disagree with the engine's own (engine_truth.disagreement: the
    client read the engine's output late) measured the host, not the engine: a moment of it (a
    pause in this process, a burst of other work) widens that side's [min, max] until no
    criterion or phase can be decided. Where at most remeasure_limit() of a side's repeats
    disagree, each is measured once more with prompts of its own (with reuse_prompts: as cold or
    warm as the first measurement, Plan.draw_of), and the new run replaces it if it agrees.
    Where more disagree, nothing is measured again: the setup is at fault, and the findings
    over the repeats name it."""
    sides = [(engine, await _endpoint(engine, api, ignore_eos))]
    if baseline is not None:
        sides.append((baseline, await _endpoint(baseline, api, ignore_eos)))
    runs: list[list[Repeat]] = [[], []]  # this engine's, the baseline's
    # the same engine as its own baseline (A/A): its second side would find the first's prompts in
    # the prefix cache, so that side draws prompts of its own (the plan's repeats past this run's)
    same = baseline is not None and baseline.handle == engine.handle
    total = repeats * len(sides)

    async def measure(side: int, label: str, draw: int, done: int) -> Repeat:
        """One repeat on `side` with the plan's prompt set `draw` (and the warm-up before it)."""
        eng, ep = sides[side]
        return await _one_repeat(
            eng,
            ep,
            plan,
            draw,
            done=done,
            total=total,
            label=label,
            timeout_s=timeout_s,
            progress=progress,
        )

    for i in range(repeats):
        for side in range(len(sides)) if i % 2 == 0 else reversed(range(len(sides))):
            label = f"repeat {i + 1}/{repeats}" + (" (baseline)" if side else "")
            draw = plan.draw_of(i, fresh=i + repeats * side * same)
            runs[side].append(await measure(side, label, draw, len(runs[0]) + len(runs[1])))

    remeasured: list[RemeasuredRepeat] = []
    spare = repeats * (1 + same)  # the first prompt set no repeat has sent
    for side in range(len(sides)):
        suspects = [
            (i, why) for i, rep in enumerate(runs[side]) if (why := disagreement(rep.metrics))
        ]
        if len(suspects) > remeasure_limit(repeats):
            continue
        for i, why in suspects:
            label = f"repeat {i + 1}/{repeats}" + (" (baseline)" if side else "")
            total += 1
            await progress(total - 1, total, f"{label} disagreed with the engine ({why}): again")
            draw = plan.draw_of(i, fresh=spare, again=True)
            again = await measure(side, f"{label} again", draw, total - 1)
            spare += draw == spare
            agreed = disagreement(again.metrics) is None
            kept, set_aside = (again, runs[side][i]) if agreed else (runs[side][i], again)
            runs[side][i] = kept
            remeasured.append(
                RemeasuredRepeat(
                    side="baseline" if side else "this engine",
                    repeat=i + 1,
                    why=why,
                    agreed=agreed,
                    set_aside=set_aside.metrics,
                )
            )
    return Runs(runs[0], runs[1], remeasured)


async def estimate_cost(
    engine: Engine,
    baseline: Engine | None,
    plan: Plan,
    work: Workload,
    *,
    repeats: int,
    budget_s: float,
    progress,
) -> float:
    """The call's measurement time (`repeats` on the engine, as many on the baseline engine),
    estimated from a short probe of each (cost.py), s; an AgentError when it passes the budget."""
    probes: dict[str, cost.CostEstimate] = {}
    for eng in [engine] + ([baseline] if baseline is not None else []):
        if eng.handle not in probes:  # an A/A check probes its one engine once
            ep = await _endpoint(eng, work.api, work.ignore_eos)
            runs = repeats * (1 + (baseline is not None and baseline.handle == engine.handle))
            probes[eng.handle] = await cost.probe(
                eng, ep, plan, work, repeats=runs, budget_s=budget_s, progress=progress
            )
            if probes[eng.handle].failed and not await eng.settled():
                raise AgentError(
                    f"the {eng.adapter.name} engine {eng.handle} died during the "
                    f"benchmark (its cost probe, before the repeats; {eng.death_cause()}); "
                    f"{eng.log_excerpt(2500)}"
                )
    sides = [probes[engine.handle]] + ([probes[baseline.handle]] if baseline is not None else [])
    return cost.check(sides, probes, repeats, budget_s)


async def _endpoint(engine: Engine, api: str, ignore_eos: bool) -> Endpoint:
    return Endpoint(
        "http://engine",
        model=await served_model(engine),
        api=api,
        uds=engine.socket_path,
        extra_body=engine.adapter.request_extras(ignore_eos=ignore_eos),
        continuous_usage=engine.adapter.continuous_usage,
    )


async def _one_repeat(
    engine: Engine,
    ep: Endpoint,
    plan: Plan,
    draw: int,
    *,
    done: int,
    total: int,
    label: str,
    timeout_s: float,
    progress,
) -> Repeat:
    requests, warmup = plan.requests_for(draw), plan.warmup_for(draw)
    n = len(requests)
    finished = [0]  # measured requests that ended, for the time-out message

    async def tick(sent, _total, message):
        finished[0] = sent
        await progress(done * n + sent, total * n, f"{label}: {message}")

    cpu_before = await _cpu_read(engine)
    before = await _scrape(engine)
    try:
        result = await asyncio.wait_for(
            engine.run_load(  # where the engine runs: no network hop in the latencies
                ep,
                requests,
                plan.arrivals,
                warmup=warmup,  # prompts of its own: none measured is in the cache from it
                tokenizer=plan.tokenizer,
                slos_ms=plan.slos_ms,
                timeout_s=timeout_s,
                progress=tick,
            ),
            timeout_s,
        )
    except asyncio.TimeoutError:
        state = _liveness(engine)
        raise AgentError(
            f"{label} on {engine.handle} did not finish within timeout_s={timeout_s:g} s: "
            f"{finished[0]} of {n} measured requests had ended (after {len(warmup)} warm-up); the rest "
            f"were abandoned and the engine is {state}. Lower num_requests, raise max_concurrency "
            "or rate, or raise timeout_s"
        ) from None
    if not (await engine.settled() if result.metrics.failed else engine.alive):
        raise AgentError(
            f"the {engine.adapter.name} engine {engine.handle} died during the benchmark ({label}; "
            f"{engine.death_cause()}); {engine.log_excerpt(2500)}"
        )
    after = await _settled_scrape(engine, before, len(warmup) + result.metrics.completed)
    engine_cpu = _engine_cpu(cpu_before, await _cpu_read(engine))
    phases = (
        {}
        if before is None or after is None
        else window(before, after) | engine_side(before, after)
    )
    return Repeat(result, repeat_metrics(result, phases, engine_cpu))


async def _cpu_read(engine: Engine) -> tuple[CpuAccount | None, float]:
    """The kernel's account of the engine's processes, and when it was read (monotonic, s)."""
    return await engine.cpu_account(), time.monotonic()


def _engine_cpu(
    before: tuple[CpuAccount | None, float], after: tuple[CpuAccount | None, float]
) -> EngineCpu | None:
    """What the engine's processes did with the CPUs between two reads; None where either read
    failed, or a thread that ended between them took its share of the account with it."""
    (first, t0), (last, t1) = before, after
    if first is None or last is None:
        return None
    ran, waited = last.ran_s - first.ran_s, last.waited_s - first.waited_s
    if ran < 0 or waited < 0:
        return None
    return EngineCpu(
        ran_ms=round(1e3 * ran, 1),
        waited_ms=round(1e3 * waited, 1),
        window_ms=round(1e3 * (t1 - t0), 1),
        load_1m=round(last.load_1m, 2),
    )


SETTLE_S = 5.0  # how long an engine's own counts may lag the last response the client read


async def _settled_scrape(
    engine: Engine, before: dict[str, float] | None, finished: int
) -> dict[str, float] | None:
    """The scrape after a run, once the engine counts as many finished requests as the client saw
    finish (or SETTLE_S has passed): engines record a request's metrics after its last chunk went
    out (vLLM's frontend on its next pass), so a scrape taken at once could miss the last ones. It
    did: one repeat of a max_num_seqs=1 vLLM read a queue time of 0.02 ms while its TTFT was 5x the
    baseline's."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = await _scrape(engine)
        if before is None or after is None or FINISHED not in after:
            return after
        if after[FINISHED] - before.get(FINISHED, 0.0) >= finished or time.monotonic() > deadline:
            return after
        await asyncio.sleep(0.05)


async def _scrape(engine: Engine) -> dict[str, float] | None:
    path = engine.adapter.metrics_path
    if path is None:
        return None
    async with engine.client(timeout_s=10) as client:
        try:
            resp = await client.get(path)
        except httpx.HTTPError:
            return None
    if resp.status_code != 200:
        return None
    try:
        return parse(resp.text)
    except ValueError:  # not Prometheus text (an engine that answers every path): no attribution
        return None
