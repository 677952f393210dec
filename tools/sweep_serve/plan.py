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
    space = Space.of(inp.space, inp.configs)
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
        args = dict(base)
        for name, value in config.items():
            if name == "extra_args":
                args["extra_args"] = [*inp.base_args.extra_args, *shlex.split(str(value))]
            else:
                args[name] = value
        launch = {"engine": inp.engine, "args": args, "ready_timeout_s": inp.ready_timeout_s}
        if inp.resources is not None:
            launch["resources"] = inp.resources
        out.append(Planned(config, label(config), launch))
    return out


def config_key(launch: dict) -> str:
    """A config as launched: its engine, its arguments and the resources of the node it ran on
    (not the ready timeout)."""
    key = {"engine": launch.get("engine"), "args": launch.get("args")}
    if launch.get("resources") is not None:  # another kind of node measures another config
        key["resources"] = launch["resources"]
    return json.dumps(key, sort_keys=True)


def bench_arguments(inp: Input, kind: str, load: float, handle: str) -> dict:
    """One step's serve_benchmark call. Its own time_budget_s (the cost probe's guard) keeps its
    default: the sweep's wall budget is checked between steps, so a step once started finishes."""
    workload = inp.workload.model_dump(mode="json", exclude_defaults=True)
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


def remember_steps(trials: Trials) -> None:
    """Key the earlier sweeps' serve_benchmark rows by config and step: each one's handle leads to
    the launch_serve row that started its engine, whose arguments name the config."""
    config_of = {
        row["result"].get("handle"): config_key(row["arguments"])
        for row in trials.rows
        if row["tool"] == "launch_serve"
    }
    for row in trials.rows:
        if row["tool"] == "serve_benchmark":
            config = config_of.get(row["arguments"].get("handle"))
            if config is not None:
                trials.remember(step_key(config, row["arguments"]), row)


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
