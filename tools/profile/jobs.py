"""profile's one side effect: run the profile job, and watch its threads from the host while it runs.

The job announces its pid (as a progress message) and waits ATTACH_WAIT_S before its
window starts; on that message we find its host pid in the sandbox's process tree and
start the samplers (sampler.py). They stop when the job ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ...sandbox.job import Job, JobResult
from ..base import AgentError, ToolContext
from .engine_window import EngineProcess, reader_for
from .plan import Plan
from .sampler import ProcSampler, PySpy, host_pid_of

if TYPE_CHECKING:
    from ...serving.loadgen import BenchRequest, Endpoint


@dataclass
class Watch:
    """What the host saw of the job's (or the engine's) threads; empty when sampling was off or
    failed. One /proc sampler and one py-spy per process watched (vLLM: three)."""

    samplers: list[ProcSampler] = field(default_factory=list)
    spies: list[PySpy] = field(default_factory=list)
    gil_holders: dict[int, dict] = field(
        default_factory=dict
    )  # tid -> {"samples", "site"} from py-spy
    stacks: list[tuple[int, str, int]] = field(
        default_factory=list
    )  # (tid, Python stack, GIL samples)
    problem: str = ""  # why there are no samples, when there are none
    phases_ms: dict[str, float] = field(default_factory=dict)  # where the call's time went, ms

    @property
    def proc(self) -> ProcSampler | None:
        return self.samplers[0] if self.samplers else None

    @property
    def spy(self) -> PySpy | None:
        return self.spies[0] if self.spies else None

    def stop_spies(self) -> None:
        for spy in self.spies:
            spy.stop()


async def run_profile_job(
    ctx: ToolContext, plan: Plan, *, sample: bool, gil_hz: int, scratch: Path
) -> tuple[JobResult, Watch]:
    watch = Watch()

    async def progress(done: float, total: float | None = None, message: str = "") -> None:
        if (
            message == "profile:window-end"
        ):  # py-spy has no times: stop it before the export holds the GIL
            await asyncio.to_thread(watch.stop_spies)
            return
        match = re.match(r"profile:attach pid=(\d+)$", message or "")
        if match is None:
            await ctx.progress(done, total, message)
            return
        await ctx.progress(0.1, 1.0, "profiling")
        if sample and watch.proc is None:
            _attach(ctx, watch, int(match.group(1)), gil_hz, plan.timeout_s, scratch)

    job = Job(
        op="profile",
        payload=plan.payload,
        kind="run",
        timeout_s=plan.timeout_s,
        env=plan.env,
        host_bound=True,  # its threads are sampled from this host (/proc, py-spy)
    )
    started = time.monotonic()
    try:
        result = await ctx.sandbox.run(job, progress)
    finally:
        await asyncio.to_thread(_stop, watch)
    watch.phases_ms["job"] = 1e3 * (time.monotonic() - started)
    if sample and watch.proc is None and not watch.problem:
        watch.problem = "the job ended before it announced its pid"
    return result, watch


def _attach(
    ctx: ToolContext, watch: Watch, job_pid: int, gil_hz: int, timeout_s: float, scratch: Path
) -> None:
    zygote_pids = getattr(ctx.sandbox, "zygote_pids", None)
    candidates = zygote_pids() if zygote_pids is not None else []
    host_pid = host_pid_of(job_pid, candidates)
    if host_pid is None:
        watch.problem = (
            f"the job's pid {job_pid} is not in the sandbox's process tree as seen from the host "
            "(no PID namespace, or the job lied); threads were not sampled from outside"
        )
        return
    watch.samplers.append(ProcSampler(host_pid))
    watch.samplers[0].start()
    watch.spies.append(PySpy(host_pid, scratch / "py-spy.txt", gil_hz, timeout_s))


def _stop(watch: Watch) -> None:
    for proc in watch.samplers:
        proc.stop()
    watch.stop_spies()
    for spy in watch.spies:  # thread ids are the sandbox's: one namespace, none repeats
        watch.gil_holders.update(spy.holders())
        watch.stacks += spy.stacks()


def check_result(result: JobResult, plan: Plan) -> dict:
    """The job's raw result, or an AgentError that says what happened and what to do."""
    if result.status == "timeout":
        raise AgentError(
            f"{plan.target} did not return within timeout_s={plan.timeout_s:g} s; it and every "
            "thread and process it started were killed. Make the entry run one bounded step "
            "(join the threads it starts), or raise timeout_s"
        )
    if result.status != "ok":
        text = result.error or result.status
        if "LoadError" in text or "has no function" in text:
            raise AgentError(f"could not load {plan.target}: {text}")
        raise AgentError(
            f"{plan.target} failed ({result.status}): {text}\n{result.stderr_tail[-1500:]}".rstrip()
        )
    raw = result.result
    if not isinstance(raw.get("window"), dict) or not isinstance(raw.get("ranges"), dict):
        raise AgentError(
            "the profile job returned a malformed result (did the code replace the worker's output?)"
        )
    if raw.get("children"):
        raise AgentError(
            f"{plan.target} started child processes (pids {raw['children'][:5]} inside the sandbox) "
            "that were still there when it returned: profile measures one process. Use threads, or "
            "wait for the children inside the entry; they have been killed"
        )
    return raw


# -- target (c): a running engine (engine_window.py: what each kind of engine gives) -----------


async def run_serve_window(
    ctx: ToolContext, plan: Plan, *, sample: bool, gil_hz: int, scratch: Path
) -> tuple[dict, Watch, dict[str, Path]]:
    """Open the engine's profiling window, keep `load_concurrency` requests in flight for
    duration_s, close it; the window comes back in the profile job's raw format, read by the
    reader of the engine's kind. Returns (raw, what the host saw, the engine's traces by name)."""
    from ..common.engines import get_engine

    engine = get_engine(ctx, plan.payload["handle"])
    reader = reader_for(engine)
    watch = Watch()
    deadline = time.monotonic() + plan.timeout_s
    with _phase(watch, "attach"):
        processes = await asyncio.to_thread(_watch_engine, watch, reader, engine, sample)
    failed, stopped, opened, window = None, {}, False, [0, 0]
    try:
        async with contextlib.AsyncExitStack() as stack:
            with _phase(watch, "load_setup"):  # before the window: none of it is the engine's work
                try:
                    load = await _prepare_load(engine, plan.payload)
                except AgentError:
                    if await engine.settled(timeout_s=0.5):
                        raise
                    # it died: /start_profile, next, names how (and what to do)
                    load = _Load(plan.payload["duration_s"], 0)
                run = (
                    await stack.enter_async_context(engine.load_generator())
                    if load.concurrency
                    else None
                )
            client = await stack.enter_async_context(
                engine.client(timeout_s=max(1.0, deadline - time.monotonic()))
            )
            # py-spy keeps no times: its samples count from when it says it attached (the engine
            # warmed torch.profiler at launch, so opening holds the GIL for ms); started before
            # the window, as attaching once the load runs measured overlap 8-12% against 4-5% in
            # the case study (replay 2): the window's first part is then sampled
            watch.spies = [
                PySpy(p.host_pid, scratch / f"py-spy-{p.host_pid}.txt", gil_hz, plan.timeout_s)
                for p in processes
            ]
            with _phase(watch, "start_profile"):
                opened = True  # from the request on: a cancel may land after the engine opened it
                await _open_window(client, engine, deadline)
            window[0] = time.monotonic_ns()
            await ctx.progress(
                0.1, 1.0, f"profiling {engine.handle} for {plan.payload['duration_s']:g} s"
            )
            with _phase(watch, "load"):
                failed = await _run_load(run, load)
    finally:  # closed however the window ends (a failed load, the client's cancel): never left on.
        # anyio's cancellation is level-triggered (every await in a cancelled scope raises again):
        # only a shielded scope lets the close run after a cancel.
        with anyio.CancelScope(shield=True):
            # py-spy stops with the load, before the export holds the GIL (it keeps no times); the
            # /proc sampler (timestamped) runs on until the window is closed: ranges past its end
            # would count as running, with no samples to say they were blocked
            window[1] = time.monotonic_ns()
            await asyncio.to_thread(watch.stop_spies)
            unwinding = sys.exc_info()[1] is not None  # a cancel or an error: that is the answer
            try:
                if opened:
                    with _phase(watch, "stop_profile"):
                        try:
                            # unwinding, the engine closes the window on the request alone; no need
                            # to wait out its export
                            stopped = await _close_window(
                                engine, deadline, watch, wait_s=UNWIND_WAIT_S if unwinding else None
                            )
                        except AgentError:
                            if not unwinding:
                                raise
                    for part in ("close", "export"):  # the engine's own account of /stop_profile
                        if isinstance(stopped.get(f"{part}_s"), (int, float)):
                            watch.phases_ms[f"engine_{part}"] = 1e3 * float(stopped[f"{part}_s"])
            finally:
                await asyncio.to_thread(_stop, watch)
    if failed:
        raise AgentError(failed)
    with _phase(watch, "read_window"):
        read = await asyncio.to_thread(
            reader.read, engine, stopped, (window[0], window[1]), deadline
        )
    return read.raw, watch, read.traces


async def _open_window(client, engine, deadline: float) -> None:
    """POST /start_profile; while the engine still exports an earlier window (a call that gave up
    waiting for it), wait for that within this call's time."""
    while True:
        try:
            await _post(client, "/start_profile", engine)
            return
        except AgentError as exc:
            # (a keep-alive connection the server closed between two tries reads as RemoteProtocolError)
            # an engine busy exporting may also refuse the connection (seen in CI: ConnectError
            # while its log showed the earlier window's export): wait while it is alive
            refused = "ConnectError" in str(exc) and engine.alive
            busy = (
                "still being exported" in str(exc) or "RemoteProtocolError" in str(exc) or refused
            )
            if not busy or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


class _phase:
    """Time one step of the call into watch.phases_ms (the answer says where the time went)."""

    def __init__(self, watch: Watch, name: str):
        self.watch, self.name = watch, name

    def __enter__(self):
        self.started = time.monotonic()

    def __exit__(self, *exc):
        self.watch.phases_ms[self.name] = 1e3 * (time.monotonic() - self.started)


def _watch_engine(watch: Watch, reader, engine, sample: bool) -> list[EngineProcess]:
    """Start a /proc sampler on each of the engine's processes; returns them (for py-spy)."""
    if not sample:
        return []
    processes = reader.processes(engine)
    if not processes:
        watch.problem = (
            "the engine's processes were not found in its cgroup; threads were not sampled"
        )
    for p in processes:
        watch.samplers.append(ProcSampler(p.host_pid, process=p.role))
        watch.samplers[-1].start()
    return processes


UNWIND_WAIT_S = 5.0  # a cancelled or failed call: time for /stop_profile to reach the engine
MIN_EXPORT_WAIT_S = (
    30.0  # /stop_profile gets at least this long, however little of timeout_s is left
)


async def _close_window(engine, deadline: float, watch: Watch, wait_s: float | None = None) -> dict:
    """POST /stop_profile within what is left of the call's time. The engine exports the window on a
    thread of its own and keeps serving; past the wait, the export goes on there and the answer says so."""
    import httpx

    wait_s = wait_s or max(MIN_EXPORT_WAIT_S, deadline - time.monotonic())
    try:
        async with engine.client(timeout_s=wait_s) as client:
            resp = await client.post("/stop_profile")
    except httpx.TimeoutException:
        spent = ", ".join(f"{k} {v / 1e3:.1f} s" for k, v in watch.phases_ms.items())
        raise AgentError(
            f"the engine did not finish exporting the profiling window within {wait_s:.0f} s "
            f"(so far: {spent}); the window is closed and the engine keeps serving while the "
            "export finishes on its own thread (a new profile is refused until then). Profile a "
            "shorter duration_s (the export grows with the ops in the window), fewer "
            "load_concurrency, or raise timeout_s"
        ) from None
    except httpx.HTTPError as exc:
        raise AgentError(
            f"the engine did not answer /stop_profile ({type(exc).__name__}); "
            f"{engine.log_excerpt(1500)}"
        ) from None
    if resp.status_code == 400 and "no profile is running" in resp.text:
        return {}  # the open failed (its error is the answer) or never reached the engine
    if resp.status_code != 200:
        raise AgentError(
            f"the engine refused /stop_profile (HTTP {resp.status_code}): {resp.text[:300]}"
        )
    try:
        body = resp.json()
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {}


async def _post(client, path: str, engine) -> dict:
    import httpx

    try:
        resp = await client.post(path)
    except httpx.HTTPError as exc:
        if not await engine.settled(timeout_s=0.5):
            raise AgentError(
                f"the {engine.adapter.name} engine {engine.handle} died before it answered {path} "
                f"({engine.death_cause()}); {engine.log_excerpt(1500)}. Launch it again "
                "(launch_serve); a profile window's trace is held in the engine's memory until it "
                "is exported: a shorter duration_s or load_concurrency needs less"
            ) from None
        raise AgentError(
            f"the engine did not answer {path} ({type(exc).__name__}); {engine.log_excerpt(1500)}"
        ) from None
    if resp.status_code != 200:
        raise AgentError(f"the engine refused {path} (HTTP {resp.status_code}): {resp.text[:300]}")
    try:
        return resp.json() if isinstance(resp.json(), dict) else {}
    except ValueError:
        return {}


PROMPTS_PER_STREAM_S = (
    20  # distinct load prompts per request in flight per second of window (a request
)
# shorter than 50 ms may see its prompt again)
MAX_LOAD_PROMPT_TOKENS = (
    1 << 18
)  # ... within this many prompt tokens in all (building them takes ~1 s)


@dataclass
class _Load:
    """The window's load, made before the window opens: its requests, and a load generator
    started ahead (its process's start, 0.5-1 s, and the prompts, up to ~1 s, are not the
    window's)."""

    duration_s: float
    concurrency: int
    ep: Endpoint | None = None  # None without load (load_concurrency=0)
    requests: list[BenchRequest] = field(default_factory=list)


async def _prepare_load(engine, payload: dict) -> _Load:
    """The load that profile's window runs under (load_concurrency requests of the asked shape)."""
    from ...serving.loadgen import Endpoint, random_requests

    load = _Load(payload["duration_s"], payload["load_concurrency"])
    if load.concurrency == 0:
        return load
    from ..common.engines import engine_tokenizer
    from ..serve_benchmark.jobs import served_model

    load.ep = Endpoint(
        "http://engine",
        model=await served_model(engine),
        uds=engine.socket_path,
        extra_body=engine.adapter.request_extras(ignore_eos=True),
    )
    # Distinct prompts for the whole window where it is cheap: the loop sends them in turn, and a prompt sent
    # twice is a prefix-cache hit, a shorter prefill than the shape asked for.
    distinct = load.concurrency * max(4, math.ceil(load.duration_s * PROMPTS_PER_STREAM_S))
    distinct = min(
        distinct, max(load.concurrency, MAX_LOAD_PROMPT_TOKENS // payload["load_input_len"])
    )
    load.requests = await asyncio.to_thread(
        random_requests,
        distinct,
        input_len=payload["load_input_len"],
        output_len=payload["load_output_len"],
        seed=0,
        tokenizer=engine_tokenizer(engine),
    )
    return load


async def _run_load(run, load: _Load) -> str | None:
    """Keep the load's requests in flight until the window's time is up, with `run` (a load
    generator made ready before the window). Returns why the load did no work, if it did none."""
    from ...serving.loadgen import Arrivals

    if load.concurrency == 0:
        await asyncio.sleep(load.duration_s)
        return None
    result = await asyncio.wait_for(
        run(
            load.ep,
            load.requests,
            Arrivals(max_concurrency=load.concurrency),
            send_for_s=load.duration_s,
        ),
        timeout=load.duration_s + 60,
    )
    failed = [r.error or "no content received" for r in result.records if not r.ok]
    if not result.records:
        return (
            "no load request was sent within the window; profile a longer duration_s, or drive the load "
            "yourself with load_concurrency=0"
        )
    if len(failed) == len(result.records):  # the window holds no work: say why instead
        return (
            f"every load request failed ({failed[0][:300]}); the window has nothing to show. Fit "
            "load_input_len + load_output_len to the engine's context, or drive the load yourself "
            "with load_concurrency=0"
        )
    return None
