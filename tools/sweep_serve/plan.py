"""What the sweep will call, before anything runs: the configs (checked against EngineArgs), each
config's launch_serve arguments, each step's serve_benchmark arguments, the keys that let a resumed
sweep find an earlier sweep's measurements, and how each SLO maps onto serve_benchmark's metrics."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from ...serving.adapters import EngineArgs
from ..base import AgentError
from ..common.sweep import Config, Space, Trials, label
from .schema import Input

# EngineArgs fields a space may vary: one value each (extra_args: a shell line, appended)
NOT_SWEPT = {"kernels": "a dict", "command": "a list"}
SWEPT = [n for n in EngineArgs.model_fields if n not in NOT_SWEPT]
# Per latency, the serve_benchmark workload field that makes goodput count it per request
GOODPUT_SLO = {"ttft": "slo_ttft_ms", "tpot": "slo_tpot_ms", "e2el": "slo_e2el_ms"}
PERCENTILE_ORDER = ("mean", "p50", "p90", "p99")


@dataclass(frozen=True)
class Planned:
    """One config: what it sets, and the launch_serve arguments that start it."""

    config: Config
    label: str
    launch: dict  # launch_serve's arguments

    @property
    def key(self) -> str:
        return config_key(self.launch)


def configs(inp: Input) -> list[Planned]:
    # explicit configs may name different keys: one a config leaves out keeps base_args' value
    # (else the engine's default); the space's names are every key any config names
    explicit = [_ordered(c, inp.configs) for c in inp.configs] if inp.configs else None
    space = Space.of(inp.space, explicit)
    unknown = [n for n in space.names if n not in EngineArgs.model_fields]
    if unknown:
        raise AgentError(
            f"space names {', '.join(map(repr, unknown))}, not an engine argument; the space "
            f"may name: {', '.join(SWEPT)}"
        )
    fixed = [n for n in space.names if n in NOT_SWEPT]
    if fixed:
        raise AgentError(
            f"space names {', '.join(fixed)} ({', '.join(NOT_SWEPT[n] for n in fixed)}): set it "
            "in base_args; a space varies one value per argument (extra_args: a shell line)"
        )
    base = inp.base_args.model_dump(mode="json", exclude_defaults=True)
    out = []
    for config in space.grid():
        config = {k: v for k, v in config.items() if v is not ENGINE_DEFAULT}
        args = dict(base)
        for name, value in config.items():
            if name == "extra_args":
                args["extra_args"] = [*inp.base_args.extra_args, *_shell_words(value, config)]
            else:
                args[name] = value
        launch = {"engine": inp.engine, "args": args, "ready_timeout_s": inp.ready_timeout_s}
        if inp.resources is not None:
            launch["resources"] = inp.resources
        out.append(Planned(config, label(config) or "base_args", launch))
    return out


ENGINE_DEFAULT = "\x00engine default"  # a key an explicit config leaves out (never a real value)


def _ordered(config: dict, every: list[dict]) -> dict:
    """`config` with every key any config names, in first-named order; ENGINE_DEFAULT where it
    names none (Space.of wants the same keys in the same order; configs() drops the marker)."""
    names = list(dict.fromkeys(k for c in every for k in c))
    return {k: config.get(k, ENGINE_DEFAULT) for k in names}


def _shell_words(value, config: dict) -> list[str]:
    try:
        return shlex.split(str(value))
    except ValueError as exc:  # an unclosed quote
        raise AgentError(
            f"config {label(config)!r}: extra_args {value!r} is not a shell line ({exc}): close "
            "the quote, or escape it"
        ) from None


def config_key(launch: dict) -> str:
    """A config as launched: its engine, its arguments and the resources of the node it ran on
    (not the ready timeout)."""
    key = {"engine": launch.get("engine"), "args": launch.get("args")}
    if launch.get("resources") is not None:  # another kind of node measures another config
        key["resources"] = launch["resources"]
    return json.dumps(key, sort_keys=True)


# Prompt seeds: each step, attempt and race round sends prompts of its own (its own seed), so
# that no measurement finds an earlier one's prompts in the engine's prefix cache. serve_benchmark
# seeds repeat i with seed + 1_000_003 * i and its warm-ups below seed; a stride of 10_007 draws
# keeps every (draw, repeat) and every warm-up apart for the 16 steps x 4 attempts and the race.
SEED_STRIDE = 10_007
ATTEMPTS = 4  # draws per ladder step: the first measurement and those made again
RACE_DRAW = 16 * ATTEMPTS  # the race's first draw (past every ladder step's: MAX_STEPS = 16)


def step_draw(step: int, attempt: int = 0) -> int:
    """The draw of ladder step `step` (0-based), attempt `attempt` (0: the first measurement)."""
    return step * ATTEMPTS + min(attempt, ATTEMPTS - 1)


def draw_seed(seed: int, draw: int) -> int:
    """The workload seed of draw `draw`: the agent's seed for the first."""
    return (seed + SEED_STRIDE * draw) % (1 << 31)


def bench_arguments(inp: Input, kind: str, load: float, handle: str, draw: int = 0) -> dict:
    """One step's serve_benchmark call, with prompts of draw `draw`. Its own time_budget_s (the
    cost probe's guard) keeps its default: the sweep's wall budget ends a step still running when
    it is spent (tools/common/sweep.py wall_clock)."""
    workload = inp.workload.model_dump(mode="json", exclude_defaults=True)
    if draw:
        workload["seed"] = draw_seed(inp.workload.seed, draw)
    if kind == "concurrency":
        workload["max_concurrency"] = int(load)
    else:
        workload["rate"] = load
    workload.update(goodput_slos(inp.slo))
    return {"handle": handle, "workload": workload, "repeats": inp.repeats}


def step_key(config: str, bench: dict) -> str:
    """A step by what it measures (the handle differs between runs)."""
    what = {"workload": bench.get("workload"), "repeats": bench.get("repeats")}
    return f"sweep_serve step {config} {json.dumps(what, sort_keys=True)}"


def race_key(leader: str, challenger: str, bench: dict) -> str:
    """A race round by its two configs and what it measures (the handles differ between runs)."""
    what = {"workload": bench.get("workload"), "repeats": bench.get("repeats")}
    return f"sweep_serve race {leader} vs {challenger} {json.dumps(what, sort_keys=True)}"


def remember_steps(trials: Trials) -> None:
    """Key the earlier sweeps' serve_benchmark rows by config and step (a race round: by its two
    configs): each one's handle leads to the launch_serve row that started its engine, whose
    arguments name the config."""
    config_of = {
        row["result"].get("handle"): config_key(row["arguments"])
        for row in trials.rows
        if row["tool"] == "launch_serve"
    }
    for row in trials.rows:
        if row["tool"] != "serve_benchmark":
            continue
        args = row["arguments"]
        config = config_of.get(args.get("handle"))
        if config is None:
            continue
        if args.get("baseline_handle") is None:
            trials.remember(step_key(config, args), row)
        elif (challenger := config_of.get(args["baseline_handle"])) is not None:
            trials.remember(race_key(config, challenger, args), row)


def goodput_slos(slo: dict[str, float]) -> dict[str, float]:
    """serve_benchmark's per-request goodput limits: per latency, the limit of its highest
    percentile named (a p99 limit is the one every request is held to)."""
    out: dict[str, float] = {}
    for lat, field in GOODPUT_SLO.items():
        named = [s for s in PERCENTILE_ORDER if f"{lat}_{s}_ms" in slo]
        if named:
            out[field] = slo[f"{lat}_{named[-1]}_ms"]
    return out


def slo_judged(slo: dict[str, float]) -> dict[str, str]:
    goodput = goodput_slos(slo)
    out = {}
    for key, limit in slo.items():
        lat = key.split("_")[0]
        counted = GOODPUT_SLO.get(lat) in goodput and goodput[GOODPUT_SLO[lat]] == limit
        out[key] = (
            f"serve_benchmark's {key[:-3]} (ms): met when every repeat's value is <= {limit:g}"
            + (f"; goodput counts requests with {lat} <= {limit:g} ms" if counted else "")
        )
    return out


REPEAT_CAP_S = 300.0  # serve_benchmark's default time_budget_s: its cost probe refuses past it


def precheck(inp: Input, ctx) -> None:
    """What would make every step's serve_benchmark refuse, found before any engine starts: each
    step's arguments as serve_benchmark validates them (its caps on SLOs and loads), the ShareGPT
    file in the workspace, and a rate too low to send the workload within serve_benchmark's time
    budget (its probe would refuse every step). An AgentError says which and what to do."""
    from pydantic import ValidationError

    from ..serve_benchmark.schema import Input as BenchInput

    for load in inp.ladder.loads:
        bench = bench_arguments(inp, inp.ladder.kind, load, "precheck")
        try:
            BenchInput.model_validate(bench)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise AgentError(
                f"every step's serve_benchmark would refuse: at {_load_words(inp, load)} its "
                f"{where} {first['msg']} (from slo= or the ladder): give values serve_benchmark "
                "takes"
            ) from None
    if inp.workload.sharegpt_path is not None:
        from ...serving.loadgen import read_sharegpt

        try:
            read_sharegpt(ctx.workspace.file(inp.workload.sharegpt_path))
        except Exception as exc:  # outside the workspace, no such file, not ShareGPT's format
            raise AgentError(f"workload.sharegpt_path: {exc}") from None
    if inp.ladder.kind == "rate":
        slowest = inp.ladder.loads[0]
        seconds = inp.workload.num_requests / slowest * inp.repeats
        if seconds > REPEAT_CAP_S:
            raise AgentError(
                f"rate {slowest:g} req/s sends {inp.workload.num_requests} requests x "
                f"{inp.repeats} repeats in about {seconds:.3g} s, past serve_benchmark's time "
                f"budget ({REPEAT_CAP_S:g} s; its probe would refuse the step): raise the "
                "ladder's lowest rate or lower workload.num_requests"
            )
    if inp.resources is not None and getattr(ctx.engines, "cluster", None) is None:
        raise AgentError(
            "resources= places each config's engine on a node of a Ray cluster, and this server "
            "runs on none: start it with --cluster auto|HOST:PORT (or a [cluster] table in "
            "infra-agent.toml), or drop resources= to run the engines on this host"
        )


def _load_words(inp: Input, load: float) -> str:
    return f"concurrency {load:g}" if inp.ladder.kind == "concurrency" else f"rate {load:g} req/s"
