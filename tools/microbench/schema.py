"""microbench's agent-facing models: what it takes (Input) and what it answers (Output).

Field descriptions are the agent's manual: every number says its unit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ...kernels.coderef import DEFAULT_IMPL_RULE
from ..base import ToolInput, ToolOutput
from ..common.cases import MAX_MICROBENCH_SHAPES
from ..common.launch_config import LaunchConfig, LaunchConfigApplied, launch_config_field

MAX_BUDGET_MS = 60_000.0  # one minute of timing per shape
DEFAULT_BUDGET_MS = 2_000.0
# With the default budget, a shape whose calls are too slow for MIN_TIMED_CALLS timed calls in
# it keeps timing up to this long: the Triton interpreter on CPU takes ~0.4 s per kda_decode call
# and ~2.9 s per tp_linear call at the zoo's own CPU shapes (6 pairs of those: ~35 s).
EXTENDED_BUDGET_MS = MAX_BUDGET_MS
MIN_TIMED_CALLS = 5  # per arm: fewer give no median worth reading
TIMEOUT_BASE_S = 30.0  # default timeout_s = TIMEOUT_BASE_S + TIMEOUT_PER_BUDGET x budget (s)
TIMEOUT_PER_BUDGET = 2.0


class Input(ToolInput):
    kernel: str = Field(
        description="Kernel spec name (list_kernels): gives the inputs, the reference the "
        "spot-checks compare against, and the cost model (FLOPs, bytes) for the roofline."
    )
    impl: str | None = Field(
        default=None,
        description="Which of the spec's implementations to time, or "
        f"'reference'. Default: {DEFAULT_IMPL_RULE}. Ignored with source/path.",
    )
    source: str | None = Field(
        default=None, description="Inline Python defining the candidate (instead of impl)."
    )
    path: str | None = Field(
        default=None, description="Workspace-relative file holding the candidate."
    )
    entry: str | None = Field(
        default=None,
        description="Function to call in source/path; takes the spec's "
        "arguments in order, returns a tensor or a tuple of tensors.",
    )
    baseline: str | None = Field(
        default=None,
        description="What to compare against, timed in the same job "
        "interleaved with the candidate: an impl name of this kernel, 'reference', or "
        "a previous experiment id (the exact code it ran, from its snapshot, is rerun now: "
        "not today's file). Omit for no A/B.",
    )
    baseline_source: str | None = Field(default=None, description="Inline Python for the baseline.")
    baseline_path: str | None = Field(
        default=None, description="Workspace-relative file for the baseline."
    )
    baseline_entry: str | None = Field(
        default=None, description="Baseline function name (default: entry)."
    )
    launch_config: LaunchConfig | None = launch_config_field()
    baseline_launch_config: LaunchConfig | None = launch_config_field(
        "the baseline arm's",
        "When baseline is a previous experiment id and this is "
        "not given, the baseline runs with the launch_config that experiment recorded in its "
        "arguments: the exact code AND config it ran. The same impl under two configs is an "
        "A/B: impl='triton', baseline='triton' with launch_config and baseline_launch_config",
    )
    shapes: list[dict[str, int]] | None = Field(
        default=None,
        description="Shapes to time, e.g. "
        "[{'M': 4096, 'N': 4096}]; several make a sweep with a plot. "
        "Default: the spec's shapes for this device. Repeats are dropped; "
        f"at most {MAX_MICROBENCH_SHAPES} shapes per call.",
    )
    dtype: str | None = Field(
        default=None, description="Input dtype (one of the spec's dtypes; default the first)."
    )
    budget_ms: float = Field(
        default=DEFAULT_BUDGET_MS,
        gt=0,
        le=MAX_BUDGET_MS,
        description="Wall-clock timing "
        "budget per shape in milliseconds, warm-up included (0 < budget_ms <= 60000). "
        "Sampling stops earlier once the median is known to target_rel_se_pct. Left at its "
        f"default ({DEFAULT_BUDGET_MS:g} ms), timing goes on past it until every arm has "
        f"{MIN_TIMED_CALLS} timed calls, up to {EXTENDED_BUDGET_MS:g} ms (slow interpreted "
        f"calls on CPU; stop_reason 'min_calls'); a budget you set is kept, and too few "
        "calls in it is an error.",
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="Wall-clock limit per shape's timing "
        "job, in seconds; the job is killed there and its timing slot freed. Default: "
        f"{TIMEOUT_BASE_S:g} s (loading the code, a first call under the Triton "
        f"interpreter) + {TIMEOUT_PER_BUDGET:g} x budget_ms (x {EXTENDED_BUDGET_MS:g} "
        "ms with the default budget).",
    )
    target_rel_se_pct: float = Field(
        default=0.5,
        gt=0,
        le=50,
        description="Stop when the standard error of each "
        "median is below this percentage of the median.",
    )
    decide_margin_pct: float | None = Field(
        default=None,
        ge=0,
        le=50,
        description="Racing (sweep_kernel passes its tie_margin_pct): with a baseline, also stop "
        "as soon as the candidate/baseline ratio of medians is decided, i.e. lies, within 3 "
        "standard errors, wholly above 1, wholly below 1, or wholly within this many percent of "
        "1 (stop_reason 'decided'). The answer's ratio CI is still the bootstrap over every "
        "sample. null: stop on target_rel_se_pct, the budget or max_samples only.",
    )
    flops_per_call: float | None = Field(
        default=None,
        ge=0,
        le=1e18,
        description="Override the spec's FLOPs per call "
        "(floating-point operations), applied to every shape.",
    )
    bytes_per_call: float | None = Field(
        default=None,
        ge=0,
        le=1e18,
        description="Override the spec's bytes moved per call (bytes), applied to every shape.",
    )
    cuda_graph: bool = Field(
        default=False,
        description="CUDA only: capture each call in a CUDA graph and time "
        "replays (for launch-bound kernels). Fails clearly if the code cannot be captured.",
    )

    def has_baseline(self) -> bool:
        return any(v is not None for v in (self.baseline, self.baseline_source, self.baseline_path))

    def max_budget_ms(self) -> float:
        """How long a shape's timing may go on: the budget given, else the extended default."""
        return (
            self.budget_ms
            if "budget_ms" in self.model_fields_set
            else max(self.budget_ms, EXTENDED_BUDGET_MS)
        )


class ArmResult(BaseModel):
    code: str = Field(description="What ran: impl name, 'source', a path, or an experiment id.")
    n: int = Field(description="Timed calls (after warm-up).")
    median_ms: float = Field(description="Median time per call, ms.")
    mean_ms: float = Field(
        description="Mean time per call, ms (pulled up by outliers; trust the median)."
    )
    p10_ms: float = Field(description="10th percentile, ms.")
    p90_ms: float = Field(description="90th percentile, ms.")
    iqr_ms: float = Field(description="Interquartile range, ms.")
    cv: float = Field(description="Coefficient of variation (standard deviation / mean), unitless.")
    median_rel_se_pct: float = Field(
        description="Standard error of the median as % of the median "
        "(distribution-free order-statistic formula)."
    )
    achieved_gflops: float | None = Field(
        default=None, description="FLOPs per call / median time, GFLOP/s."
    )
    achieved_gbps: float | None = Field(
        default=None, description="Bytes per call / median time, GB/s."
    )
    pct_of_peak_flops: float | None = Field(
        default=None, description="% of the measured compute ceiling (dtype)."
    )
    pct_of_peak_bandwidth: float | None = Field(
        default=None, description="% of the measured memory bandwidth."
    )
    pct_of_roofline: float | None = Field(
        default=None,
        description="Best possible time under both ceilings / "
        "median time, % (100 = at the roofline).",
    )
    bound: Literal["memory", "compute", "latency"] | None = Field(
        default=None,
        description="Which limit binds: "
        "memory, compute, or latency (far from both: "
        "launch/interpreter/sync overhead).",
    )
    is_impossible: bool = Field(
        default=False,
        description="True when the median is under the physical floor "
        "(bytes / best bandwidth, FLOPs / best rate): the code skips work or fools the clock.",
    )
    roofline_note: str = Field(default="", description="The roofline reading in words.")
    spot_check: Literal["passed", "failed", "skipped"] = Field(
        description="Outputs of randomly chosen timed calls "
        "vs the reference; 'failed' voids the timing."
    )
    spot_check_detail: str = Field(
        default="", description="Which timed calls were checked and the worst error."
    )


class ShapeResult(BaseModel):
    shape: dict[str, int] = Field(description="The named sizes of this case.")
    dtype: str = Field(description="Input dtype.")
    flops_per_call: float = Field(description="FLOPs per call used for the roofline.")
    bytes_per_call: float = Field(description="Bytes moved per call used for the roofline.")
    stop_reason: str = Field(
        description="'target_se' (medians known to the target), 'decided' (the ratio was "
        "decided: decide_margin_pct), 'budget' (time ran out first), 'min_calls' (the default "
        f"budget ran out before every arm had {MIN_TIMED_CALLS} timed calls, and timing went on "
        "until it had) or 'max_samples'."
    )
    warmup_calls: int = Field(description="Untimed warm-up calls per arm.")
    warmup_stable: bool = Field(
        description="False when times were still drifting when warm-up ran out."
    )
    num_input_sets: int = Field(
        description="Input sets rotated across calls (sized to overflow the cache)."
    )
    candidate: ArmResult
    baseline: ArmResult | None = None
    ratio: float | None = Field(
        default=None,
        description="Median over the interleaved pairs of candidate time / baseline time (the "
        "two calls of a pair ran back to back): < 1 faster, unitless. The CI is of this same "
        "statistic, so it holds the ratio; it can differ a little from candidate.median_ms / "
        "baseline.median_ms.",
    )
    ci_low: float | None = Field(
        default=None,
        description="95% CI of the ratio, lower end (a circular block bootstrap of "
        "the pairs; under 40 pairs the exact sign-test interval of the median).",
    )
    ci_high: float | None = Field(default=None, description="95% CI of the ratio, upper end.")
    min_detectable_effect_pct: float | None = Field(
        default=None,
        description="Smallest change (%) this noise "
        "level detects 80% of the time; smaller claims are noise.",
    )
    verdict: Literal["faster", "slower", "inconclusive", "invalid", "measured"] = Field(
        description="A/B verdict for this shape; 'measured' without a baseline; 'invalid' when a spot-check "
        "failed or a time is physically impossible."
    )


class Output(ToolOutput):
    verdict: Literal["faster", "slower", "inconclusive", "mixed", "invalid", "measured"] = Field(
        description="Over all shapes: the common verdict, 'mixed' when shapes disagree."
    )
    shapes: list[ShapeResult] = Field(description="One entry per shape, in the order given.")
    device: dict = Field(
        description="The device fingerprint the worker reported (name, cores, torch, ...)."
    )
    clocks: dict = Field(description="Clock readings when readable (CPU MHz, GPU SM clock).")
    ceilings: dict = Field(
        description="The peaks used for the roofline, with their source (measured/datasheet)."
    )
    timer: str = Field(description="How each call was timed.")
    disturbances: list[str] = Field(
        description="What besides the code could have moved the numbers."
    )
    triton_compiles: int = Field(
        default=0,
        description="Triton cache entries (kernels and their launchers) the "
        "timing jobs compiled; the shapes of one call share one cache, so a kernel compiles "
        "once per set of constexprs, not per shape. 0 when Triton runs interpreted (CPU).",
    )
    launch_config_applied: dict[str, LaunchConfigApplied] | None = Field(
        default=None,
        description="Per arm ('candidate', 'baseline'): where its launch config's names went "
        "(the first shape's timing job); null when no arm had one.",
    )
