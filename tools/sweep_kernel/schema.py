"""sweep_kernel's agent-facing models: what it takes (Input) and what it answers (Output).

Field descriptions are the agent's manual: every number says its unit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ...kernels.coderef import DEFAULT_IMPL_RULE
from ..base import ToolInput, ToolOutput
from ..common.sweep import MAX_GRID_POINTS, SPACE_DESCRIPTION, BudgetInput, Range, Scalar

MAX_SWEEP_SHAPES = 8
# The first racing round's timing budget per pair (doubles each round): microbench's own default
# budget. A pair needs about 2 x (5 timed + 6 warm-up) calls; interpreted Triton on a 2-core CPU
# host took 25-160 ms a call at the zoo's CPU shapes (rmsnorm, loaded host), so 200 ms left
# 9 of 24 race timings too short (retried larger); 2 s fits calls up to ~90 ms. A GPU pair
# stops once decided (decide_margin_pct), so the larger budget costs only undecided pairs.
DEFAULT_ROUND_MS = 2000.0
MAX_ROUNDS = 5


class Input(ToolInput):
    kernel: str = Field(
        description="Kernel spec name (list_kernels): its inputs, reference, tolerances and cost model."
    )
    impl: str | None = Field(
        default=None,
        description=f"Which of the spec's implementations to sweep. Default: {DEFAULT_IMPL_RULE}. "
        "Ignored with source/path.",
    )
    source: str | None = Field(default=None, description="Inline Python defining the candidate.")
    path: str | None = Field(default=None, description="Workspace-relative file of the candidate.")
    entry: str | None = Field(
        default=None, description="Function to call in source/path (default: the kernel's name)."
    )
    space: dict[str, list[Scalar] | Range] | None = Field(
        default=None,
        description=f"{SPACE_DESCRIPTION}; each config is the candidate's `launch_config` (a name the "
        "entry takes as a keyword is passed to it; any other overrides that tl.constexpr or launch "
        f"option in its Triton launches). Over {MAX_GRID_POINTS} configs, Optuna samples `budget.trials` "
        "of them.",
    )
    configs: list[dict[str, Scalar]] | None = Field(
        default=None,
        description="An explicit list of configs instead of space, e.g. [{'BLOCK_N': 64, "
        "'num_warps': 2}, {'BLOCK_N': 128, 'num_warps': 4}].",
    )
    shapes: list[dict[str, int]] | None = Field(
        default=None,
        max_length=MAX_SWEEP_SHAPES,
        description="Shapes to race on, each its own race and winner. Default: the spec's shapes for "
        f"this device. At most {MAX_SWEEP_SHAPES}.",
    )
    dtype: str | None = Field(
        default=None, description="Input dtype (one of the spec's; default its first)."
    )
    target: str | None = Field(
        default=None,
        description="GPU target to compile every config for, ahead of time (compile_kernel's "
        "targets, e.g. 'sm_90a'; default: compile_kernel's default). No GPU is needed.",
    )
    constraints: list[str] | None = Field(
        default=None,
        max_length=20,
        description="Conditions every config's compiled kernel must meet, in the expect language "
        "over compile_kernel's fields (resource expect://compile_kernel), e.g. "
        "['spill_stores_bytes == 0', 'registers_per_thread <= 128']. A config that breaks one is "
        "dropped with the numbers.",
    )
    numerics_trials: int = Field(
        default=1,
        ge=1,
        le=5,
        description="Fresh random inputs per shape in the numerics gate (check_numerics trials).",
    )
    round_ms: float = Field(
        default=DEFAULT_ROUND_MS,
        gt=0,
        le=10_000,
        description="Timing budget of the first racing round per (challenger, leader) pair and "
        f"shape, ms; it doubles each round, for at most {MAX_ROUNDS} rounds. The default fits "
        "about 22 calls of up to ~90 ms (interpreted Triton on a CPU host: tens of ms a call); a "
        "pair stops early once decided. Raise it for slower calls; lower it on a GPU to spend "
        "less on pairs that stay undecided.",
    )
    tie_margin_pct: float = Field(
        default=2.0,
        ge=0,
        le=50,
        description="A challenger whose ratio CI against the leader lies wholly within this many "
        "percent of 1 is as fast (a tie) and stops racing, %.",
    )
    strategy: Literal["race", "grid"] = Field(
        default="race",
        description="'race': successive rounds drop configs whose ratio CI against the leader "
        "excludes being faster, doubling the survivors' budget; 'grid': every config timed once "
        f"against the first, at the last round's budget (round_ms x 2^{MAX_ROUNDS - 1}), for comparison.",
    )
    budget: BudgetInput | None = Field(
        default=None,
        description="Wall time and trial count for the whole sweep; spent, the answer is partial "
        "(what was measured, and what was not).",
    )
    resume: str | None = Field(
        default=None,
        description="The experiment id of an earlier sweep_kernel call with the same arguments "
        "(it crashed, was cancelled, or ran out of budget): its trials are reused, not rerun.",
    )
    seed: int = Field(
        default=0,
        ge=0,
        le=2**31 - 1,
        description="Seed of the Optuna sampler (sampled spaces only).",
    )


class ConfigResult(BaseModel):
    config: dict[str, Scalar] = Field(description="The launch_config this row is about.")
    stage: Literal["compile", "numerics", "race", "not_tried"] = Field(
        description="The last stage it reached: dropped at compile or numerics, raced, or never "
        "tried (the budget ran out)."
    )
    dropped: str | None = Field(
        default=None, description="Why it left the sweep (the stage's own words and numbers)."
    )
    registers_per_thread: int | None = Field(
        default=None, description="From its compile for the target (first kernel)."
    )
    spill_stores_bytes: int | None = Field(
        default=None, description="Spill stores from its compile, bytes."
    )
    median_ms: dict[str, float] = Field(
        default_factory=dict,
        description="Median time per call on each shape it was timed on (shape label -> ms), from "
        "its last racing round.",
    )
    geomean_ms: float | None = Field(
        default=None,
        description="Geometric mean of median_ms over every shape (null unless timed on all), ms.",
    )
    trials: list[str] = Field(
        default_factory=list, description="Experiment ids of the calls made for this config."
    )


class Contender(BaseModel):
    config: dict[str, Scalar] = Field(description="A config still in the race at its end.")
    ratio: float | None = Field(
        description="Its median time / the winner's, interleaved in one job (null: the winner)."
    )
    ci_low: float | None = Field(description="95% CI of the ratio, lower end.")
    ci_high: float | None = Field(description="95% CI of the ratio, upper end.")


class ShapeWinner(BaseModel):
    shape: dict[str, int] = Field(description="The shape raced.")
    winner: dict[str, Scalar] | None = Field(
        description="The fastest config, always one timed on this shape (null: none survived, or "
        "the race is undecided with no config timed: see undecided_because)."
    )
    winner_median_ms: float | None = Field(description="The winner's median time per call, ms.")
    decided: bool = Field(
        description="True when the winner was timed and every other config's ratio CI against "
        "the winner either excludes it being as fast or lies within tie_margin_pct of 1 (a tie); "
        "false (undecided) when the budget or the rounds ran out with configs still undecided, "
        "or a pair could not be timed (see undecided_because)."
    )
    undecided_because: str | None = Field(
        default=None,
        description="Why the shape is undecided: the budget, configs not told apart in the "
        "rounds, or pairs microbench could not time (refused twice, or over its budget cap), "
        "by name. Null when decided, or when no config survived the gates.",
    )
    tied_with: list[Contender] = Field(
        description="Configs the race could not tell from the winner, with their ratio CIs."
    )
    rounds: int = Field(description="Racing rounds run on this shape.")
    timing_ms: float = Field(
        description="Timing budget spent on this shape's race, summed over its calls, ms."
    )


class Output(ToolOutput):
    kernel: str = Field(description="The kernel swept.")
    candidate: str = Field(description="What was swept: an impl name, 'source' or a path.")
    dtype: str = Field(description="Input dtype.")
    target: str = Field(description="The target every config was compiled for.")
    device: str = Field(
        description="Where timing ran: 'cuda', or 'cpu' (Triton interpreted: ranks CPU work, not "
        "GPU speed; num_warps and num_stages change nothing there)."
    )
    sampler: Literal["grid", "optuna"] = Field(
        description="grid: every config of the space; optuna: TPE-sampled (space over the cap)."
    )
    space_size: int = Field(description="Configs in the space.")
    tried: int = Field(description="Configs that entered the compile stage.")
    seen_fraction: float = Field(description="tried / space_size, 0..1.")
    compiled: int = Field(description="Configs that compiled and met every constraint.")
    passed_numerics: int = Field(description="Configs that then passed the numerics gate.")
    shapes: list[ShapeWinner] = Field(description="Per shape: the winner and its contenders.")
    best: dict[str, Scalar] | None = Field(
        description="The best single config across shapes: lowest geometric mean of median times "
        "among configs timed on every shape (null: none was)."
    )
    best_geomean_ms: float | None = Field(description="Its geometric-mean median time, ms.")
    configs: list[ConfigResult] = Field(
        description="Every config: how far it got, and its numbers."
    )
    complete: bool = Field(
        description="False when the budget ended the sweep first (a partial answer)."
    )
    stopped_because: str | None = Field(
        default=None, description="Why the sweep ended early (null when it finished)."
    )
    trials_made: int = Field(description="Child calls made by this sweep.")
    trials_reused: int = Field(
        description="Child calls answered from an earlier sweep's record (resume=)."
    )
    trials_remeasured: int = Field(
        default=0,
        description="Recorded calls of the resumed sweep(s) measured again instead of reused, "
        "because a file they ran has changed since (their code snapshot no longer matches).",
    )
    timing_ms: float = Field(description="Timing budget spent over every race, ms.")
    mixed_devices: str | None = Field(
        None,
        description="Set when the configs were timed on devices with different fingerprints "
        "(nodes of a cluster): which configs ran on which device. Each A/B pair is one job on "
        "one device, but the medians, the winners across rounds and the best config's geometric "
        "mean then mix devices.",
    )
