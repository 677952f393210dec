"""serve_benchmark's input and output: the agent's manual (every field with its unit)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ...serving.adapters import ADAPTERS, EngineArgs
from ...serving.loadgen import MAX_IN_FLIGHT, TTFT_RULE
from ..base import ToolInput, ToolOutput
from ..common.engines import resources_field
from ..common.expect import HypothesisAnswer

LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "p50", "p90", "p99")


class Workload(BaseModel):
    model_config = ConfigDict(
        extra="forbid"
    )  # a misspelt key (num_request) must not run the defaults

    dataset: Literal["random", "shared_prefix", "sharegpt"] = Field(
        "random",
        description="random: prompts of "
        "exact token lengths; shared_prefix: groups "
        "sharing a long prefix (prefix caching); "
        "sharegpt: a ShareGPT-format JSON file.",
    )
    num_requests: int = Field(
        64,
        ge=1,
        le=5000,
        description="Measured requests per repeat "
        "(at most 5000, for safety: with at most 256 in flight a repeat must end within "
        "timeout_s).",
    )
    input_len: int = Field(
        32,
        ge=1,
        le=1 << 17,
        description="Prompt length, tokens (random; shared_prefix: the unique suffix).",
    )
    output_len: int = Field(
        16, ge=1, le=1 << 15, description="Tokens asked per request (max_tokens)."
    )
    range_ratio: float = Field(
        0.0, ge=0, lt=1, description="Lengths uniform in [len*(1-r), len*(1+r)]."
    )
    prefix_len: int = Field(
        128, ge=1, le=1 << 17, description="shared_prefix: shared prefix length, tokens."
    )
    num_prefixes: int = Field(
        4, ge=1, le=1000, description="shared_prefix: number of distinct prefixes."
    )
    sharegpt_path: str | None = Field(
        None, max_length=4096, description="sharegpt: the JSON file, in the workspace."
    )
    rate: float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="Arrival rate, requests/s: Poisson/gamma gaps "
        "from scheduled absolute times. null: all at once (at most "
        f"{MAX_IN_FLIGHT} in flight), or a closed loop with max_concurrency in flight.",
    )
    burstiness: float = Field(
        1.0,
        gt=0,
        le=1000,
        description="Gamma shape of the gaps: 1 = Poisson, <1 "
        "burstier; the gaps' CV is 1/sqrt(burstiness).",
    )
    max_concurrency: int | None = Field(
        None,
        ge=1,
        le=MAX_IN_FLIGHT,
        description="Requests in flight at most "
        f"(default and ceiling {MAX_IN_FLIGHT}: the client's connection pool slows "
        "with more; later requests wait, and their "
        "timers start at the scheduled time, so the wait shows in TTFT).",
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**31 - 1,
        description="Seeds prompts and arrivals (a 31-bit integer). Each repeat "
        "draws new prompts from (seed, repeat index), so repeat i of this run and of a baseline "
        "send the same ones.",
    )
    reuse_prompts: bool = Field(
        False,
        description="Send the first repeat's prompts in every repeat: later "
        "repeats then find them in the prefix cache (a cache-warm measurement).",
    )
    warmup: int = Field(
        2,
        ge=0,
        le=100,
        description="Requests sent first, one at a time, and excluded from the metrics; of "
        "the workload's shape with prompts no measured request sends (none then finds its "
        "prompt in the prefix cache from them).",
    )
    api: Literal["completions", "chat"] = Field(
        "completions", description="/v1/completions or /v1/chat/completions."
    )
    ignore_eos: bool = Field(
        True,
        description="Ask for exactly output_len tokens where the engine accepts "
        "ignore_eos (random prompts stop early otherwise); never sent to engines that "
        "reject it.",
    )
    slo_ttft_ms: float | None = Field(None, gt=0, le=1e7, description="Goodput SLO on TTFT, ms.")
    slo_tpot_ms: float | None = Field(None, gt=0, le=1e7, description="Goodput SLO on TPOT, ms.")
    slo_e2el_ms: float | None = Field(
        None, gt=0, le=1e8, description="Goodput SLO on E2E latency, ms."
    )


class Input(ToolInput):
    handle: str | None = Field(
        None, max_length=64, description="A running engine from launch_serve."
    )
    engine: Literal[tuple(ADAPTERS)] | None = Field(
        None,
        description="Instead of handle: start this engine "  # type: ignore[valid-type]
        "for the benchmark and stop it afterwards.",
    )
    args: EngineArgs = Field(
        default_factory=EngineArgs, description="Engine arguments with engine=."
    )
    workload: Workload = Field(default_factory=Workload, description="What to send, and when.")
    baseline: str | None = Field(
        None,
        max_length=64,
        description="experiment_id of an earlier serve_benchmark: "
        "enables baseline.<metric> in criteria/expect and the per-phase attribution.",
    )
    baseline_handle: str | None = Field(
        None,
        max_length=64,
        description="Instead of baseline: a running engine "
        "(launch_serve handle; may be this same handle, for an A/A check) measured "
        "with the same workload in this call, its repeats alternating with this "
        "run's (A B B A ...), so that a drifting machine moves both alike. The "
        "steadier comparison on a shared host; it takes twice the time.",
    )
    criteria: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="Acceptance criteria, in the "
        "expect language over this tool's metrics, judged over the repeats with their "
        "spread, e.g. ['ttft_p50 <= 1.05 * baseline.ttft_p50', 'failed == 0'].",
    )
    repeats: int = Field(
        3,
        ge=1,
        le=20,
        description="Runs of the workload (at most 20, for safety; the cost "
        "probe refuses a call estimated past time_budget_s); each metric is the median over "
        "runs with the [min, max] over runs as its interval.",
    )
    timeout_s: float = Field(
        600.0,
        gt=0,
        le=7200,
        description="Wall-clock limit per repeat, warm-up "
        "included, s: at the limit the requests in flight are abandoned (the engine keeps "
        "running) and the call ends with an error that says how far the repeat got.",
    )
    ready_timeout_s: float = Field(
        300.0,
        gt=0,
        le=3600,
        description="With engine=: how long to wait for the engine to answer its health check, s.",
    )
    resources: dict[str, float] | None = resources_field("the engine engine= starts")
    time_budget_s: float = Field(
        300.0,
        gt=0,
        le=86400,
        description="Before the repeats, a short probe times the engine on "
        "the workload's shape (one request, then a few together) and estimates the whole "
        "measurement (every repeat, on both engines with baseline_handle); past this budget, s, "
        "the call refuses with the estimate. Raise it to run a long benchmark anyway.",
    )


class PhaseChange(BaseModel):
    phase: str = Field(
        description="queue, prefill, decode, kv_transfer (engine-side time per request), or "
        "preemptions / prefix_cache_hit_rate."
    )
    metric: str = Field(
        description="The engine metric it comes from (vLLM's name where vLLM has one)."
    )
    baseline: float | None = Field(
        description="Baseline value: ms per request (times), count, or fraction."
    )
    candidate: float | None = Field(description="This run's value, same unit.")
    delta: float | None = Field(description="candidate - baseline, same unit.")
    delta_pct: float | None = Field(
        description="delta / baseline, percent; null when baseline is 0."
    )


class LatencyRow(BaseModel):
    metric: str = Field(description="ttft, tpot, itl or e2el.")
    mean: float | None = Field(
        description="Mean over requests (itl: over chunks), ms; median over repeats."
    )
    p50: float | None = Field(description="Median, ms; median over repeats.")
    p90: float | None = Field(description="90th percentile, ms; median over repeats.")
    p99: float | None = Field(description="99th percentile, ms; median over repeats.")
    p50_range: list[float] | None = Field(description="[min, max] of p50 over repeats, ms.")


class EngineCpu(BaseModel):
    """The kernel's account of the engine's processes over one repeat (from the scrape before it
    to the one after), summed over their threads (/proc/<pid>/task/<tid>/schedstat)."""

    ran_ms: float = Field(description="Time on a CPU, ms.")
    waited_ms: float = Field(description="Time ready to run but waiting for a CPU, ms.")
    window_ms: float = Field(description="Wall time between the two reads, ms.")
    load_1m: float = Field(description="The host's 1-minute load average at the second read.")


class RepeatMetrics(BaseModel):
    """One run of the workload (every latency in ms, throughputs per second)."""

    completed: int = Field(description="Requests that streamed text.")
    failed: int = Field(description="Requests that errored or streamed nothing.")
    errors: dict[str, int] = Field(
        default_factory=dict,
        description="Why requests failed: error (first line, e.g. 'HTTP 422: ...') -> count.",
    )
    no_text_requests: int = Field(
        0,
        description="Completed requests whose tokens decoded to no text (EOS at once, "
        "special tokens): their TTFT is at the first chunk with choices (vLLM's rule).",
    )
    reconnected: int = Field(
        0,
        description="Requests sent a second time, on a fresh connection, because the engine "
        "closed the idle keep-alive connection they first went out on before answering (it "
        "never saw that send; the retry's wait is in their latencies). Counted whether or not "
        "the second send succeeded.",
    )
    duration_s: float = Field(description="First scheduled send to last chunk, s.")
    request_throughput: float = Field(description="Completed requests/s.")
    output_throughput: float = Field(description="Output tokens/s.")
    total_token_throughput: float = Field(description="Prompt + output tokens/s.")
    goodput: float | None = Field(None, description="Requests/s meeting every SLO given.")
    slo_attainment_pct: float | None = Field(
        None, description="Share of completed requests meeting every SLO, %."
    )
    client_cpu_wait_ms: float | None = Field(
        None,
        description="How long the load generator was ready to run but waited for a CPU during "
        "this run, ms (the kernel's account of its thread; None where the kernel keeps none): "
        "its timestamps are late by up to this much (finding client_starved).",
    )
    engine_cpu: EngineCpu | None = Field(
        None,
        description="The engine's processes over this run: time on a CPU and time ready to run "
        "but waiting for one (None where the kernel's account cannot be read, e.g. a lost node). "
        "Beside client_cpu_wait_ms it says which side of the run the host kept waiting: the "
        "engine's latencies hold its waits, the client's timestamps the load generator's.",
    )
    latencies_ms: dict[str, dict[str, float]] = Field(
        description="ttft/tpot/itl/e2el (and itl_per_token when the "
        "engine reports tokens per chunk) -> mean/median/std/p90/p99, "
        "ms."
    )
    phases_ms: dict[str, float | None] = Field(
        default_factory=dict,
        description="Engine-side mean time per "
        "request in this run: queue, prefill, decode, kv_transfer, "
        "engine_ttft (ms); preemptions (count), prefix_cache_hit_rate "
        "(0-1); engine_ttft_p50_ms (from the engine's TTFT histogram, "
        "with engine_ttft_p50_low_ms/high_ms: the bucket it lies in), "
        "engine_itl_mean_ms (its mean inter-token gap) and "
        "engine_itl_p50_high_ms (the top of its inter-token p50's bucket), which the "
        "client's numbers are checked against.",
    )


class RemeasuredRepeat(BaseModel):
    """A repeat whose client numbers disagreed with the engine's own, measured once more."""

    side: Literal["this engine", "baseline"] = Field(description="Whose repeat it was.")
    repeat: int = Field(description="Which of that side's repeats, 1-based.")
    why: str = Field(
        description="How the client's numbers disagreed with the engine's own, in words (a TTFT "
        "gap, tokens in bursts, or the load generator waiting for a CPU)."
    )
    agreed: bool = Field(
        description="Whether the new measurement agreed with the engine: then it took the "
        "repeat's place (in repeats or baseline_repeats, the medians and the intervals); if it "
        "did not, the first measurement kept its place."
    )
    set_aside: RepeatMetrics = Field(
        description="The measurement left out: the first when the new one agreed, else the new one."
    )


class Output(ToolOutput):
    handle: str = Field(description="The engine benchmarked.")
    engine: str = Field(description="Its adapter: builtin, transformers, vllm, sglang, command.")
    target: str = Field(
        "",
        description="What ran, in words: the engine with its model and "
        "non-default arguments, requests x repeats, the workload's shape and "
        "arrivals, the API.",
    )
    estimated_s: float | None = Field(
        None,
        description="The cost probe's estimate of the "
        "measurement before it ran (every repeat, both engines), s; "
        "compare elapsed_s.",
    )
    elapsed_s: float | None = Field(None, description="Wall time the repeats took, s.")
    first_error: str | None = Field(
        None,
        description="The first failed request's error as the "
        "engine (or the client) gave it, e.g. 'HTTP 400: ...' (up to 300 "
        "characters); null when none failed. Every error with its count: "
        "repeats[].errors.",
    )
    metrics: dict[str, float | None] = Field(
        description="Median over repeats: ttft_p50, ttft_p90, ttft_p99, "
        "ttft_mean, the same for tpot, itl, e2el (ms); output_throughput, "
        "request_throughput (per s), completed, failed, reconnected, goodput, "
        "slo_attainment_pct, and the phases (queue_ms, prefill_ms, "
        "decode_ms, kv_transfer_ms, preemptions, prefix_cache_hit_rate)."
    )
    latencies: list[LatencyRow] = Field(
        default_factory=list,
        description="The latency metrics as a table (the same numbers as metrics).",
    )
    spread: dict[str, list[float]] = Field(
        default_factory=dict,
        description="[min, max] over repeats per metric: the interval criteria are judged with.",
    )
    repeats: list[RepeatMetrics] = Field(description="Each run, in order.")
    baseline_metrics: dict[str, float | None] | None = Field(
        None,
        description="The baseline experiment's metrics (same names), when baseline= was given.",
    )
    baseline_spread: dict[str, list[float]] = Field(
        default_factory=dict, description="The baseline's [min, max] over its repeats."
    )
    baseline_source: str | None = Field(
        None,
        description="Where the baseline numbers come from: 'experiment <id>' "
        "(measured earlier) or 'handle <h>, alternating' (measured in this call).",
    )
    device_fingerprint: str | None = Field(
        None,
        description="The device the benchmarked engine ran on: sha256 (16 hex) of its host's "
        "device facts, a cluster node's when resources= placed it there (compare_experiments "
        "and the other_device finding read it).",
    )
    baseline_device_fingerprint: str | None = Field(
        None,
        description="The device the baseline ran on, the same way (null: a recorded baseline "
        "whose device is not known, e.g. one measured on two nodes before this field existed).",
    )
    baseline_repeats: list[RepeatMetrics] = Field(
        default_factory=list,
        description="baseline_handle: the "
        "baseline's runs, in order (they alternated with `repeats`).",
    )
    remeasured: list[RemeasuredRepeat] = Field(
        default_factory=list,
        description="Repeats measured again because the client's numbers disagreed with the "
        "engine's own (at most half of a side's repeats, and one more run each; finding "
        "repeat_remeasured). Empty when every repeat agreed, or when most of a side's did not "
        "(then client_engine_gap or client_starved names the cause).",
    )
    criteria: HypothesisAnswer = Field(
        default_factory=HypothesisAnswer,
        description="The acceptance criteria "
        "judged: supported (pass), contradicted (fail), inconclusive (the spread "
        "straddles the threshold: see undecided).",
    )
    undecided: list[str] = Field(
        default_factory=list,
        description="Per inconclusive criterion: "
        "which side's spread over repeats kept it open and what would "
        "decide it (more repeats cannot: [min, max] only widens; the "
        "requests per repeat that would, from the observed spreads "
        "shrinking as 1/sqrt(requests)).",
    )
    phases: list[PhaseChange] = Field(
        default_factory=list,
        description="With a baseline: which engine phase moved, largest absolute change first.",
    )
    findings: list[str] = Field(
        default_factory=list,
        description="The layer that moved and the next cheapest "
        "experiment, in words; and the harness's checks of its own numbers: "
        "client_starved (the load generator waited for a CPU for much of a run), "
        "client_engine_gap (the client's TTFT far above the engine's own, its chunks "
        "arriving in bursts, or its TPOT mean below the engine's own mean inter-token gap: "
        "a count it got wrong, or first chunks read late while it waited for a CPU; "
        "'on the baseline engine' for the baseline's repeats), "
        "repeat_remeasured (one repeat disagreed with the engine and was run again), "
        "cache_warm_repeats (the repeats' prefix-cache hit "
        "rates differ), baseline_cache_warm (the baseline's prefix-cache hit rate and this "
        "run's differ: one side measured a warm cache), single_wave (every request sent at once "
        "and all in flight together: each repeat is one burst) and other_device (the baseline "
        "ran on another kind of device).",
    )
    prefix_cache_hit_rates: list[float | None] = Field(
        default_factory=list,
        description="Each repeat's share "
        "of prompt tokens found in the prefix cache (0-1), in "
        "order; null where the engine exports no such counter.",
    )
    definitions: dict[str, str] = Field(
        default_factory=lambda: dict(DEFINITIONS), description="How each latency is defined here."
    )
    output_tokens_source: str = Field(
        description="'usage' when the engine counted output tokens, else how they were counted."
    )


DEFINITIONS = {
    "ttft": "time to first token: " + TTFT_RULE + ", from the scheduled send time",
    "tpot": "(e2el - ttft) / (output tokens - 1), per request with > 1 output token",
    "itl": "gap between consecutive content chunks (one sample per chunk); itl_per_token spreads each gap over "
    "the tokens its chunk carried",
    "e2el": "last chunk minus scheduled send time",
    "timers": "start at the scheduled send time, so client-side queueing is included (vllm#54101)",
}
