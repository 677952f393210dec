"""sweep_serve's input and output: the agent's manual (every field with its unit)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...serving.adapters import ADAPTERS, EngineArgs
from ...serving.loadgen import MAX_IN_FLIGHT
from ..base import ToolInput, ToolOutput
from ..common.engines import resources_field
from ..common.sweep import SPACE_DESCRIPTION, BudgetInput, Range, Scalar
from ..serve_benchmark.schema import LATENCIES, STATS, Workload

# serve_benchmark's own bound on num_requests, read from its schema so the two cannot drift
MAX_REPEAT_REQUESTS = next(
    int(m.le) for m in Workload.model_fields["num_requests"].metadata if hasattr(m, "le")
)

MAX_STEPS = 16  # ladder steps per config: each is a serve_benchmark call
SLO_KEYS = tuple(f"{lat}_{s}_ms" for lat in LATENCIES for s in STATS)  # ttft_p99_ms, ...


class Ladder(BaseModel):
    """The loads each config is measured at, lowest first."""

    model_config = ConfigDict(extra="forbid")

    concurrencies: list[int] | None = Field(
        None,
        description=f"Closed-loop steps: requests in flight (1..{MAX_IN_FLIGHT}), increasing, "
        "e.g. [1, 2, 4, 8].",
    )
    rates: list[float] | None = Field(
        None, description="Open-loop steps: arrival rates, requests/s, increasing, e.g. [2, 4, 8]."
    )

    @model_validator(mode="after")
    def _sane(self) -> Ladder:
        if (self.concurrencies is None) == (self.rates is None):
            raise ValueError(
                "the ladder takes exactly one of concurrencies=[1, 2, 4] or rates=[2, 4, 8]"
            )
        steps: list = self.concurrencies or self.rates or []
        if not steps:
            raise ValueError("the ladder has no steps: give at least one load")
        if len(steps) > MAX_STEPS:
            raise ValueError(
                f"the ladder has {len(steps)} steps, over the cap of {MAX_STEPS} (each is a "
                "serve_benchmark call per config): keep fewer, e.g. doubling steps"
            )
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"the ladder's loads must increase strictly (got {steps})")
        if self.concurrencies and not 1 <= min(steps) <= max(steps) <= MAX_IN_FLIGHT:
            raise ValueError(f"concurrencies lie in 1..{MAX_IN_FLIGHT} (got {steps})")
        if self.rates and not 0 < min(steps) <= max(steps) <= 1e6:
            raise ValueError(f"rates lie in (0, 1e6] requests/s (got {steps})")
        return self

    @property
    def kind(self) -> Literal["concurrency", "rate"]:
        return "concurrency" if self.concurrencies is not None else "rate"

    @property
    def loads(self) -> list[float]:
        return [float(v) for v in (self.concurrencies or self.rates or [])]


class ServeBudget(BudgetInput):
    """The sweep's budget; a key it does not know is refused (a misspelt wall_s must not run
    the default half hour)."""

    model_config = ConfigDict(extra="forbid")


class Input(ToolInput):
    engine: Literal[tuple(ADAPTERS)] = Field(  # type: ignore[valid-type]
        "builtin", description="The engine adapter every config starts (as launch_serve takes it)."
    )
    base_args: EngineArgs = Field(
        default_factory=EngineArgs,
        description="Engine arguments every config shares (launch_serve's args); each config "
        "overrides the ones it names.",
    )
    space: dict[str, list[Scalar] | Range] | None = Field(
        None,
        description=SPACE_DESCRIPTION + ", each an engine argument (launch_serve's args), e.g. "
        "{'max_num_seqs': [4, 16], 'max_num_batched_tokens': [64, 256]}. extra_args takes "
        "strings, split like a shell line and appended to base_args.extra_args "
        "(e.g. ['', '--enforce-eager']).",
    )
    configs: list[dict[str, Scalar]] | None = Field(
        None, description="Instead of space: an explicit list of configs (engine arguments)."
    )
    workload: Workload = Field(
        default_factory=Workload,
        description="serve_benchmark's workload without its load and SLOs: the ladder sets "
        "max_concurrency or rate per step, slo sets slo_*_ms.",
    )
    ladder: Ladder = Field(description="The loads each config climbs, lowest first.")
    slo: dict[str, float] = Field(
        default_factory=dict,
        description="Latency limits a step must meet, ms, by serve_benchmark metric: "
        + ", ".join(SLO_KEYS)
        + " (e.g. {'ttft_p99_ms': 200, 'tpot_p50_ms': 50}). A step meets one when every "
        "repeat's value is at or under it. Goodput counts requests under the limit of each "
        "ttft/tpot/e2el named (the highest percentile's, when several are).",
    )
    objective: Literal["goodput", "output_throughput", "load"] = Field(
        "goodput",
        description="What picks the best config, at each config's highest load meeting the "
        "SLO: goodput (requests/s meeting every SLO), output_throughput (tokens/s), or load "
        "(the highest load itself).",
    )
    repeats: int = Field(
        2,
        ge=1,
        le=5,
        description="serve_benchmark repeats per step. Each number is the median over repeats "
        "with [min, max] as its interval: 1 repeat gives no interval; with n repeats a further "
        "run falls outside [min, max] with probability 2/(n+1) (2/3 at n=2): a range, not a "
        "confidence interval.",
    )
    budget: ServeBudget | None = Field(
        None,
        description="Wall time and most configs to try; spent, the sweep answers with what it "
        "measured and lists the configs not tried. The wall budget also ends the calls still "
        "running (an engine's launch, a serve_benchmark; their engines stopped).",
    )
    resume: str | None = Field(
        None,
        max_length=64,
        description="experiment_id of an earlier sweep_serve with the same engine, args, space, "
        "workload, ladder, slo and repeats: its measured steps are reused, the rest measured.",
    )
    ready_timeout_s: float = Field(
        300.0, gt=0, le=3600, description="Per config: how long launch_serve waits for health, s."
    )
    resources: dict[str, float] | None = resources_field("each config's engine")
    race_rounds: int = Field(
        20,
        ge=0,
        le=40,
        description="After the ladders, the two leading configs race side by side (both "
        "engines up, serve_benchmark alternating A B B A at the deciding load, fresh prompts "
        "each round) until the paired ratio's 95% interval excludes 1 (decided), lies within "
        "tie_margin_pct of 1 (a tie) or this many rounds ran (undecided). A clear difference "
        "settles at round 2; two equal configs take the most rounds. 0: no race (the best "
        "config is the ladders' pick, undecided).",
    )
    race_repeat_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description="Each race repeat sends enough requests to last about this long at the "
        "deciding load (from the request throughput the ladders measured there; never fewer "
        f"than workload.num_requests, at most {MAX_REPEAT_REQUESTS}), s. Shorter repeats are noisier: on a quiet "
        "2-core host a pair of 12-request repeats (~0.03 s) spread 13% at one sigma, of 1 s "
        "repeats 4% (bench/sweep_serve_aa.py). 0: workload.num_requests as given.",
    )
    tie_margin_pct: float = Field(
        5.0,
        gt=0,
        le=50,
        description="A race whose ratio's interval lies wholly within this percent of 1 is a "
        "tie, %.",
    )

    @field_validator("slo")
    @classmethod
    def _known_slo(cls, slo: dict[str, float]) -> dict[str, float]:
        for key, limit in slo.items():
            if key not in SLO_KEYS:
                raise ValueError(
                    f"slo {key!r}: serve_benchmark measures {', '.join(SLO_KEYS)} (ms); "
                    "name one of those (other percentiles cannot be judged)"
                )
            if limit <= 0:
                raise ValueError(f"slo {key!r} must be > 0 ms (got {limit})")
        return slo

    @field_validator("workload")
    @classmethod
    def _no_load(cls, work: Workload) -> Workload:
        for name in ("rate", "max_concurrency", "slo_ttft_ms", "slo_tpot_ms", "slo_e2el_ms"):
            if getattr(work, name) is not None:
                what = "ladder=" if name in ("rate", "max_concurrency") else "slo="
                raise ValueError(f"workload.{name} is set by the sweep: give it through {what}")
        return work


class Step(BaseModel):
    load: float = Field(description="max_concurrency (requests in flight) or rate (requests/s).")
    experiment_id: str = Field(description="The serve_benchmark child that measured it.")
    reused: bool = Field(description="True when an earlier sweep (resume) measured it.")
    slo_met: bool = Field(description="Every SLO met by every repeat, and no request failed.")
    broke: list[str] = Field(description="Each SLO missed, with its value and limit, ms.")
    goodput: float | None = Field(description="Requests/s meeting every SLO (median).")
    goodput_interval: list[float] | None = Field(description="[min, max] over repeats, req/s.")
    request_throughput: float | None = Field(
        None, description="Requests/s, every request counted (median over repeats)."
    )
    output_throughput: float | None = Field(description="Output tokens/s, all users (median).")
    output_throughput_interval: list[float] | None = Field(
        description="[min, max] over repeats, tokens/s."
    )
    output_throughput_repeats: list[float | None] = Field(
        default_factory=list,
        description="Output tokens/s of each repeat, in order (the over-saturation rule pairs "
        "repeat i of one step with repeat i of the next).",
    )
    output_throughput_per_user: float | None = Field(
        description="Output tokens/s per user: output_throughput / concurrency (vllm bench sweep "
        "plot_pareto's tokens/s/user); for rates / the mean requests in flight (Little's law: "
        "request_throughput x mean E2E latency)."
    )
    ttft_p50_ms: float | None = Field(description="Median TTFT, ms (median over repeats).")
    slo_values: dict[str, list[float]] = Field(
        description="Per SLO metric: [min, max] over repeats, ms."
    )
    failed: int | None = Field(description="Failed requests (median over repeats).")
    device_fingerprint: str | None = Field(
        None,
        description="The device its engine ran on (serve_benchmark's device_fingerprint: a "
        "cluster node's with resources=, else the server's host's); null for a step recorded "
        "before benchmarks named it.",
    )
    seed: int | None = Field(
        None,
        description="The prompts' seed this step sent (its own per step and attempt, so that no "
        "step finds an earlier step's prompts in the engine's prefix cache).",
    )
    prefix_cache_hit_rates: list[float | None] = Field(
        default_factory=list,
        description="Per repeat, the share of prompt tokens the engine found in its prefix cache "
        "(0-1, the engine's own counter); null where the engine exports none.",
    )
    findings: list[str] = Field(
        default_factory=list,
        description="The serve_benchmark child's findings, as it gave them ('code: words': "
        "client_starved, client_engine_gap, repeat_remeasured, cache_warm_repeats, ...).",
    )
    excluded: str | None = Field(
        None,
        description="Why this step is kept out of the SLO verdicts (highest_load, the front, "
        "the best config), 'code: words': cache_warm_step (the engine found the step's prompts in "
        "its prefix cache), client_starved (the load generator waited for a CPU, measured again "
        "and still so), single_wave (num_requests <= concurrency: one wave, no steady state); "
        "null when it counts.",
    )
    set_aside: list[str] = Field(
        default_factory=list,
        description="serve_benchmark children of this step set aside because they measured the "
        "host (client_starved) and measured again: this step's numbers are the last attempt's.",
    )
    over_saturated: bool = Field(
        False,
        description="The ladder stopped here on over-saturation: never the config's highest load.",
    )

    @property
    def counts(self) -> bool:
        """Whether the step takes part in SLO verdicts."""
        return self.excluded is None and not self.over_saturated


class ConfigAnswer(BaseModel):
    config: dict[str, Scalar] = Field(description="The engine arguments this config set.")
    label: str = Field(description="The config in one line.")
    launch_id: str | None = Field(description="Its launch_serve child (null: all steps reused).")
    steps: list[Step] = Field(description="Each ladder step measured, lowest load first.")
    stopped: str = Field(
        description="Why the ladder ended: complete, the SLO break (step and metric), "
        "over-saturation, a failed step, or the budget."
    )
    complete: bool = Field(
        description="The ladder ended by itself (all steps, an SLO break or over-saturation); "
        "false when the budget or an error cut it off."
    )
    highest_load: float | None = Field(
        description="The highest load meeting the SLO (requests in flight or requests/s); null "
        "when the first step broke it."
    )
    goodput: float | None = Field(description="Goodput there, requests/s.")
    goodput_interval: list[float] | None = Field(description="Its [min, max] over repeats.")
    output_throughput: float | None = Field(description="Output tokens/s there, all users.")
    output_throughput_interval: list[float] | None = Field(
        description="Its [min, max] over repeats, tokens/s."
    )
    output_throughput_per_user: float | None = Field(description="Output tokens/s per user there.")
    findings: list[str] = Field(
        default_factory=list,
        description="Every step's findings (its serve_benchmark child's, and why a step is kept "
        "out of the verdicts), each 'at <load>: code: words'.",
    )


class FrontPoint(BaseModel):
    label: str = Field(description="The config.")
    load: float = Field(description="The step's load.")
    output_throughput_per_user: float = Field(description="Tokens/s per user (x axis).")
    output_throughput: float = Field(description="Tokens/s in all (y axis).")
    experiment_id: str = Field(description="The serve_benchmark that measured it.")


class Race(BaseModel):
    """The leading configs measured side by side: how the best config was decided."""

    outcome: Literal["decided", "tie", "undecided"] = Field(
        description="decided: the paired ratio's 95% interval excludes 1; tie: it lies wholly "
        "within tie_margin_pct of 1 (the two are as good as each other); undecided: the rounds "
        "or the budget ended first (the best config is then the ladders' pick, not a verdict)."
    )
    winner: str = Field(description="The better config of the two (its label): the best config.")
    runner_up: str = Field(description="The other config (its label).")
    metric: str = Field(
        description="What was compared: goodput (requests/s meeting every SLO; request "
        "throughput without per-request SLOs) or output_throughput (tokens/s)."
    )
    load: float = Field(
        description="The deciding load, both measured at it: the higher of the two configs' "
        "highest loads meeting the SLO (requests in flight or requests/s)."
    )
    ratio: float | None = Field(
        description="winner / runner_up of the metric: the geometric mean of the paired "
        "ratios (repeat i of one against repeat i of the other, measured back to back)."
    )
    interval: list[float] | None = Field(
        description="The ratio's 95% confidence interval (Student t over the log ratios)."
    )
    pairs: int = Field(description="Paired measurements, one repeat of each config per pair.")
    repeat_requests: int = Field(
        description="Requests per repeat in the race's rounds (sized by race_repeat_s)."
    )
    rounds: int = Field(description="serve_benchmark calls (each alternating A B B A).")
    kept_out: list[str] = Field(
        default_factory=list,
        description="Rounds run but left out of the ratio because their serve_benchmark said it "
        "measured the host (client_starved: the load generator waited for a CPU), each with "
        "that finding: on a busy host the pairs of one round share its state, and two identical "
        "engines read 8-20% apart round by round. 'pairs' counts only the rounds kept.",
    )
    tie_margin_pct: float = Field(description="The tie margin used, %.")
    budget_cut: bool = Field(
        False,
        description="True when the sweep's wall budget (budget.wall_s) ended the race before it "
        "settled or ran all its rounds: the answer is partial (resume=<the sweep's id> runs the "
        "rounds left).",
    )
    why: str = Field(description="The decision in words, with what ended the race.")
    experiment_ids: list[str] = Field(
        description="The race's children: launches, the alternating serve_benchmarks, stops."
    )


class Dropped(BaseModel):
    config: dict[str, Scalar] = Field(description="The engine arguments.")
    label: str = Field(description="The config in one line.")
    reason: str = Field(description="Why: the launch_serve child's error.")
    experiment_id: str | None = Field(description="The failing child.")


class Output(ToolOutput):
    load_kind: str = Field(description="concurrency (requests in flight) or rate (requests/s).")
    configs: list[ConfigAnswer] = Field(description="Each config tried, in the space's order.")
    front: list[FrontPoint] = Field(
        description="Pareto front over every step meeting the SLO: no other step has both more "
        "tokens/s per user and more tokens/s in all; by tokens/s per user."
    )
    best: str | None = Field(description="The best config by the objective (its label).")
    best_config: dict[str, Scalar] | None = Field(description="Its engine arguments.")
    best_value: float | None = Field(
        description="Its objective at its highest load meeting the SLO (goodput: req/s; "
        "output_throughput: tokens/s; load: its unit)."
    )
    dropped: list[Dropped] = Field(description="Configs whose engine did not start, and why.")
    not_tried: list[dict[str, Scalar]] = Field(description="Configs the budget left out.")
    partial: bool = Field(
        description="True when the budget ended the sweep early: configs not tried, a ladder cut "
        "off, or the race cut before it settled (race.budget_cut)."
    )
    budget_note: str | None = Field(description="What the budget ended, and when.")
    slo_judged: dict[str, str] = Field(description="Per SLO: how a step is judged against it.")
    interval_note: str = Field(description="What the [min, max] intervals mean at these repeats.")
    trials: list[str] = Field(
        description="Every child experiment (launch_serve, serve_benchmark, stop_serve) this "
        "call made or reused, in order; experiment://<this id> lists the ones it made."
    )
    measured_steps: int = Field(description="serve_benchmark calls made by this call.")
    reused_steps: int = Field(description="Steps answered from an earlier sweep (resume).")
    remeasured_steps: int = Field(
        default=0,
        description="Recorded calls of the resumed sweep(s) measured again instead of reused, "
        "because a file they ran has changed since (their code snapshot no longer matches).",
    )
    num_configs: int = Field(description="Configs in the space.")
    race: Race | None = Field(
        None,
        description="How the best config was decided against the runner-up (null: fewer than "
        "two configs met the SLO, or race_rounds=0).",
    )
    decided: bool = Field(
        False,
        description="True when the best config won its race (the paired ratio's interval "
        "excludes 1); false for a tie, an undecided race, or no race.",
    )
    findings: list[str] = Field(
        default_factory=list,
        description="The steps' findings counted by code ('code: in N of M steps ...'), the "
        "steps kept out of the verdicts and why, and why steps did not run.",
    )
    mixed_devices: str | None = Field(
        None,
        description="Set when the configs' engines ran on devices with different fingerprints "
        "(nodes of a cluster): which configs ran on which device. The best config and the "
        "front then compare devices as well as configs.",
    )
