"""What every sweep shares: its space, its trials, its budget, and how it is written out.

A sweep (sweep_kernel, sweep_serve) is one tool call that makes many: each trial is another
tool's call (compile_kernel, check_numerics, microbench; launch_serve, serve_benchmark) made
through `ToolContext.call`, so it is an experiment of its own in the ledger, with its code
snapshot, whose parent is the sweep. That is also what makes a sweep resumable: called again
with `resume=<the earlier sweep's id>`, it makes the same calls in the same order, and a call
the earlier sweep (or one it resumed) already made with the same arguments, that ended well,
on code whose files still hash the same, is answered from the ledger instead of run again.
Nothing measured is lost and no trial is measured twice.

- `Space`: named dimensions (lists or ranges) whose product is the grid, or an explicit list
  of configs; `MAX_GRID_POINTS` is the cap past which a sweep samples instead (sweep_kernel:
  Optuna) or refuses.
- `Trials`: the calls, the resume chain, and what was reused.
- `Budget`: wall time and a trial count; it ends a sweep with a partial answer, never a
  timeout, and gives the ETA the progress line shows.
- `pareto_front`, `csv_text`: the answer's front and its table.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, Field, model_validator

from ..base import CANCELLED_BECAUSE, AgentError, CallOutcome, Progress, ToolContext
from . import provenance

MAX_GRID_POINTS = 256
Scalar = int | float | bool | str
Config = dict[str, Scalar]


class Range(BaseModel):
    """A numeric dimension given by its ends: `step` (arithmetic) or `factor` (geometric)."""

    start: float = Field(description="First value, included.")
    stop: float = Field(description="Last value, included when the steps land on it.")
    step: float | None = Field(
        default=None, gt=0, description="Add this each time (e.g. 1: 1, 2, 3, 4)."
    )
    factor: float | None = Field(
        default=None, gt=1, description="Multiply by this each time (e.g. 2: 32, 64, 128)."
    )

    @model_validator(mode="after")
    def _one_rule(self) -> Range:
        if (self.step is None) == (self.factor is None):
            raise ValueError("a range takes exactly one of step or factor")
        if self.stop < self.start:
            raise ValueError(f"a range's stop ({self.stop:g}) is below its start ({self.start:g})")
        if self.factor is not None and self.start <= 0:
            raise ValueError("a geometric range (factor) needs start > 0")
        return self

    def values(self) -> list[Scalar]:
        """Every value from start to stop (stop included when a step lands on it, within float
        rounding), however many: the space's size counts them all (the cap applies after)."""
        if self.step is not None:
            count = math.floor((self.stop - self.start) / self.step * (1 + 1e-12) + 1e-9) + 1
            raw = [self.start + i * self.step for i in range(min(count, MAX_RANGE_VALUES + 1))]
        else:
            ratio = math.log(self.stop / self.start) / math.log(self.factor or 2)
            count = math.floor(ratio * (1 + 1e-12) + 1e-9) + 1
            raw = [
                self.start * (self.factor or 2) ** i
                for i in range(min(count, MAX_RANGE_VALUES + 1))
            ]
        if count > MAX_RANGE_VALUES:
            raise AgentError(
                f"a range of {count} values (start {self.start:g}, stop {self.stop:g}) is over the "
                f"{MAX_RANGE_VALUES} a dimension may hold: raise step or factor, or narrow it"
            )
        return [_clean(v) for v in raw]


MAX_RANGE_VALUES = 10_000  # one dimension's values (a sampled space may exceed the grid's cap)


def _clean(value: float) -> Scalar:
    """A range value without float noise (0.1 + 2 * 0.1 is 0.3; 4.0 is 4)."""
    if not value.is_integer():
        value = float(f"{value:.12g}")
    return int(value) if value.is_integer() else value


SPACE_DESCRIPTION = (
    "The dimensions to search, by name: a list of values (e.g. {'BLOCK_N': [64, 128, 256], "
    "'num_warps': [2, 4, 8]}) or a range ({'start': 32, 'stop': 512, 'factor': 2} or with 'step'). "
    "The sweep tries their product"
)


@dataclass(frozen=True)
class Space:
    """The configs a sweep may try: the product of its dimensions, or an explicit list."""

    dimensions: dict[str, tuple[Scalar, ...]]
    explicit: tuple[Config, ...] | None = None

    @classmethod
    def of(
        cls, space: dict[str, list[Scalar] | Range] | None, configs: list[Config] | None
    ) -> Space:
        if configs:
            if space:
                raise AgentError(
                    "give space (a product of dimensions) or configs (a list), not both"
                )
            names = list(configs[0])
            for c in configs:
                if list(c) != names:
                    raise AgentError(
                        f"every config names the same keys in the same order: {names} vs {list(c)}"
                    )
            seen = {n: tuple(dict.fromkeys(c[n] for c in configs)) for n in names}
            return cls(seen, tuple(_unique(configs)))
        if not space:
            raise AgentError(
                "the space is empty: give space={'NAME': [values], ...} or configs=[{...}, ...]"
            )
        dims: dict[str, tuple[Scalar, ...]] = {}
        for name, values in space.items():
            listed = values.values() if isinstance(values, Range) else list(values)
            if not listed:
                raise AgentError(f"space[{name!r}] has no values")
            dims[name] = tuple(dict.fromkeys(listed))
        return cls(dims)

    @property
    def size(self) -> int:
        if self.explicit is not None:
            return len(self.explicit)
        return math.prod(len(v) for v in self.dimensions.values())

    @property
    def names(self) -> list[str]:
        return list(self.dimensions)

    def grid(self) -> list[Config]:
        """Every config, in a fixed order (the first dimension varies slowest)."""
        if self.explicit is not None:
            return [dict(c) for c in self.explicit]
        if self.size > MAX_GRID_POINTS:
            raise AgentError(self.over_cap())
        names = self.names
        return [dict(zip(names, combo)) for combo in itertools.product(*self.dimensions.values())]

    def over_cap(self) -> str:
        sizes = " x ".join(f"{len(v)} {n}" for n, v in self.dimensions.items())
        return (
            f"the space has {self.size} configs ({sizes}), over the cap of {MAX_GRID_POINTS} a sweep "
            f"enumerates: narrow a dimension, or give an explicit list of configs"
        )


def _key(config: Config) -> str:
    return json.dumps(config, sort_keys=True)


def _unique(configs: list[Config]) -> list[Config]:
    seen: dict[str, Config] = {}
    for c in configs:
        seen.setdefault(_key(c), c)
    return list(seen.values())


def label(config: Config) -> str:
    """A config as one short line: BLOCK_N=128 num_warps=4."""
    return " ".join(f"{k}={v}" for k, v in config.items())


def mixed_devices(devices_of: dict[str, set[str]], compared: str, remedy: str) -> str | None:
    """Which configs (by label) were measured on which device fingerprints, when that is more
    than one device (nodes of a cluster that differ): the sweep's `compared` answer then compares
    devices as well as configs, and `remedy` says how to measure them on one kind."""
    by_device: dict[str, list[str]] = {}
    for config_label, devices in devices_of.items():
        for device in sorted(devices):
            by_device.setdefault(device, []).append(config_label)
    if len(by_device) < 2:
        return None
    where = "; ".join(f"device {d}: {', '.join(labels)}" for d, labels in by_device.items())
    return (
        f"the configs ran on {len(by_device)} devices ({where}): {compared} compare devices as "
        f"well as configs; {remedy}"
    )


# ---- trials: child calls, reused on resume -------------------------------------------------


@dataclass
class Trials:
    """The calls a sweep makes. `resume` names an earlier sweep of the same tool whose calls
    (and those of the sweeps it resumed) answer identical calls here."""

    ctx: ToolContext
    rows: list[dict] = field(
        default_factory=list
    )  # every ok call of the resume chain, oldest first
    recorded: dict[str, list[dict]] = field(default_factory=dict)  # call key -> ledger rows
    made: int = 0
    reused: int = 0
    changed_code: int = 0  # recorded calls not reused because a file they ran has changed since
    # Progress per call (sweep_kernel): the budget's clock and the calls the sweep expects in all
    budget: Budget | None = None
    expected: int = 0

    @classmethod
    def for_sweep(
        cls,
        ctx: ToolContext,
        tool: str,
        resume: str | None,
        same: dict,
        refusal: Callable[[dict], bool] | None = None,
        may_differ: frozenset[str] = frozenset(),
    ) -> Trials:
        """`same`: this call's arguments that must equal the resumed sweep's; `may_differ`:
        arguments besides NOT_THE_SWEEP a resumed sweep may change (how far to go, not what).
        `refusal`: which recorded errors answer a resumed call too (a sweep whose next call's
        arguments come from an error's words, such as a budget refusal's estimate, replays the
        error so the calls after it are the ones it recorded)."""
        trials = cls(ctx)
        for sweep_id in _resume_chain(ctx, tool, resume, same, may_differ):
            for row in ctx.children(sweep_id):
                if row["status"] == "ok" and isinstance(row.get("result"), dict):
                    trials.rows.append(row)
                    trials.remember(call_key(row["tool"], row["arguments"]), row)
                elif row["status"] == "error" and refusal is not None and refusal(row):
                    trials.remember(call_key(row["tool"], row["arguments"]), row)
        return trials

    def remember(self, key: str, row: dict) -> None:
        """Let `row` answer a call made with `key` (a sweep whose calls carry a value that differs
        between runs, such as an engine handle, keys them by what they measure instead)."""
        self.recorded.setdefault(key, []).append(row)

    def has(self, key: str) -> bool:
        """Whether a call made with `key` would be answered from the ledger (a serve sweep
        starts an engine only for a step no earlier sweep measured)."""
        return any(
            _code_unchanged(self.ctx.workspace.root, r.get("code"))
            for r in self.recorded.get(key, [])
        )

    async def call(
        self, tool: str, arguments: dict, key: str | None = None, progress: Progress | None = None
    ) -> Trial:
        """The call's outcome: from the ledger when an earlier sweep made it, else made now.
        `key`: what identifies the call's measurement (default: its tool and arguments);
        `progress`: where a call made now reports its own progress (default: nowhere)."""
        rows = self.recorded.get(key or call_key(tool, arguments))
        while rows:
            row = rows.pop(0)  # each recorded call answers one call here: exactly once
            if _code_unchanged(self.ctx.workspace.root, row.get("code")):
                self.reused += 1
                error = (row.get("error") or "error") if row["status"] == "error" else None
                outcome = CallOutcome(row["id"], None if error else row["result"], error)
                trial = Trial(outcome, reused=True)
                await self._report(tool, arguments, trial)
                return trial
            self.changed_code += 1
        self.made += 1
        made = await (
            self.ctx.call(tool, arguments, progress)
            if progress is not None
            else self.ctx.call(tool, arguments)
        )
        trial = Trial(made, reused=False)
        await self._report(tool, arguments, trial)
        return trial

    def devices(self, trial: Trial) -> list[str]:
        """The device fingerprints a trial's work ran on (provenance.devices_ran_on)."""
        row = self.ctx.experiment(trial.outcome.experiment_id)
        return provenance.devices_ran_on(row) if row else []

    async def _report(self, tool: str, arguments: dict, trial: Trial) -> None:
        """One progress line per call when the sweep set an expected count: what ran, how it
        ended, how many so far, and the ETA at the pace so far."""
        if not self.expected or self.budget is None:
            return
        done = self.made + self.reused
        self.expected = max(self.expected, done)
        how = "reused" if trial.reused else "ok" if trial.outcome.ok else "error"
        config = arguments.get("launch_config")
        what = f"{tool} {label(config)}" if isinstance(config, dict) else tool
        # reused calls cost nothing: the pace is the made ones'
        eta = self.budget.eta(self.expected - done, done=self.made)
        await self.ctx.progress(
            done, self.expected, f"{what}: {how} · call {done} of ~{self.expected} · {eta}"
        )


@dataclass(frozen=True)
class Trial:
    outcome: CallOutcome
    reused: bool

    @property
    def result(self) -> dict:
        return self.outcome.result or {}


def call_key(tool: str, arguments: dict) -> str:
    return f"{tool} {json.dumps(arguments, sort_keys=True, default=str)}"


# Arguments a resumed sweep may change: they say how far to go and why, not what to measure.
NOT_THE_SWEEP = frozenset({"resume", "budget", "hypothesis", "expect"})


def _resume_chain(
    ctx: ToolContext,
    tool: str,
    resume: str | None,
    same: dict,
    may_differ: frozenset[str] = frozenset(),
) -> list[str]:
    """The earlier sweep and the ones it resumed, after checking it swept the same thing
    (`same`: this call's arguments as the agent gave them)."""
    chain: list[str] = []
    while resume and resume not in chain:
        row = ctx.experiment(resume)
        if row is None:
            raise AgentError(f"resume={resume!r}: no such experiment; list_experiments shows ids")
        if row["tool"] != tool:
            raise AgentError(
                f"resume={resume!r} is a {row['tool']} call, not a {tool}; give the id of the "
                f"{tool} call to continue"
            )
        recorded = row.get("arguments") or {}
        differs = sorted(
            k
            for k in set(same) | set(recorded)
            if k not in NOT_THE_SWEEP | may_differ and recorded.get(k) != same.get(k)
        )
        if not chain and differs:
            raise AgentError(
                f"resume={resume!r} swept something else (it differs in {', '.join(differs)}); "
                "resume with the same arguments, or start a new sweep (omit resume)"
            )
        chain.append(resume)
        resume = recorded.get("resume")
    return chain


def _code_unchanged(root: Path, manifest: dict | None) -> bool:
    """Whether every workspace file the recorded call ran still has the bytes it had then."""
    for path, entry in ((manifest or {}).get("files") or {}).items():
        file = root / path
        try:
            if hashlib.sha256(file.read_bytes()).hexdigest() != entry.get("sha256"):
                return False
        except OSError:
            return False
    return True


# ---- budget and progress ---------------------------------------------------------------------


class BudgetInput(BaseModel):
    """How much a sweep may spend; spent, it ends with what it measured (a partial answer)."""

    wall_s: float = Field(
        default=1800.0, gt=0, le=86_400, description="Wall-clock seconds for the whole sweep."
    )
    trials: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="Most configs to try (sampled spaces: how many Optuna proposes). "
        "Default: the whole grid.",
    )


@dataclass
class Budget:
    wall_s: float
    trials: int | None
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    @classmethod
    def of(cls, given: BudgetInput | None) -> Budget:
        given = given or BudgetInput()
        return cls(given.wall_s, given.trials)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def spent(self) -> str | None:
        """Why the sweep must stop now, or None."""
        if (why := self.wall_spent()) is not None:
            return why
        if self.trials is not None and self.done >= self.trials:
            return f"the trial budget ({self.trials}) is spent"
        return None

    def wall_spent(self) -> str | None:
        """Why no further call may start (the wall clock), or None: the trial count decides which
        configs enter a sweep, not whether the calls of one that entered are made."""
        if self.elapsed_s >= self.wall_s:
            return f"the wall-clock budget ({self.wall_s:g} s) is spent"
        return None

    def eta(self, remaining: int, done: int | None = None) -> str:
        """Time left for `remaining` more at the mean pace of the `done` so far (default: the
        configs tried), capped by the wall budget."""
        done = self.done if done is None else done
        if not done:
            return "ETA unknown"
        left = min(self.elapsed_s / done * remaining, self.wall_s - self.elapsed_s)
        return f"ETA {_duration(max(left, 0.0))}"


@contextlib.contextmanager
def wall_clock(budget: Budget, tool: str) -> Iterator[anyio.CancelScope]:
    """A scope the wall budget cancels once spent: the calls still running in it end (their
    sandbox jobs killed), and their ledger rows say the sweep's budget ended them, not the client.
    `scope.cancelled_caught` afterwards: whether it did."""
    with anyio.move_on_after(max(budget.wall_s - budget.elapsed_s, 0.0)) as scope:
        why = (
            f"ended by {tool}'s wall budget (budget.wall_s={budget.wall_s:g} s was spent), not by "
            "the client: resume the sweep with a larger budget to run it"
        )
        token = CANCELLED_BECAUSE.set(lambda: why if scope.cancel_called else None)
        try:
            yield scope
        finally:
            CANCELLED_BECAUSE.reset(token)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# ---- what a sweep writes out ------------------------------------------------------------------


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (both maximised), by x."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (ox >= x and oy >= y) and (ox > x or oy > y)
            for j, (ox, oy) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def csv_text(rows: list[dict[str, Any]]) -> str:
    """The rows as CSV, columns in first-seen order (missing cells empty)."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in row.items()}
        )
    return out.getvalue()
