"""profile's input and output: the field descriptions are the agent's manual."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr, model_validator

from ..base import ToolInput, ToolOutput

MIN_WINDOW_S = (
    0.1  # the shortest serve window: ~100 /proc rounds and 10+ py-spy samples at its lowest rate
)


class Input(ToolInput):
    kernel: str | None = Field(
        default=None,
        description="Target (a): a kernel spec (list_kernels). Its calls run "
        "on the spec's inputs; pick the code with impl (or 'reference') or source/path+entry.",
    )
    impl: str | None = Field(
        default=None,
        description="With kernel: the implementation to profile, or 'reference'. "
        "Default: the spec's first implementation.",
    )
    shape: dict[str, int] | None = Field(
        default=None,
        description="With kernel: the named sizes, e.g. "
        "{'M': 64, 'N': 256}. Default: the spec's first shape for this device. "
        "`shapes` (the name other tools use) is accepted: one shape, or a "
        "list of exactly one.",
    )
    shapes: list[dict[str, int]] | dict[str, int] | None = Field(
        default=None,
        description="Alias of shape, as other tools name it: one shape or a list of one.",
    )
    dtype: str | None = Field(
        default=None, description="With kernel: input dtype (default: the spec's first)."
    )
    calls: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="With kernel: calls profiled (after one warm-up); "
        "the ceiling of 10,000 is for safety, and timeout_s bounds the job whatever the count.",
    )
    source: str | None = Field(
        default=None,
        description="Inline Python: the kernel candidate (with kernel) or, "
        "without kernel, target (b): a workload whose entry runs one step of a stack "
        "(threads of its own allowed) and returns when the step is done.",
    )
    path: str | None = Field(default=None, description="Workspace-relative file instead of source.")
    entry: str | None = Field(
        default=None, description="Function to call in source/path (required with them)."
    )
    workload_args: list = Field(
        default_factory=list, description="Workload only: JSON values passed positionally to entry."
    )
    handle: str | None = Field(
        default=None,
        description="Target (c): a running builtin or vllm engine from launch_serve, "
        "profiled through its /start_profile and /stop_profile for duration_s while a load "
        "runs (builtin: its engine thread, HTTP threads and any KV-transfer thread; ranges such "
        "as prefill, decode, schedule, dispatch, combine, kv_transfer. vllm: the ops of its own "
        "torch traces, the threads of its API server, engine core and worker processes).",
    )
    duration_s: float | None = Field(
        default=None,
        ge=MIN_WINDOW_S,
        le=600,
        description="With handle: seconds "
        f"to profile under load (default 3; at least {MIN_WINDOW_S:g}: a shorter "
        "window holds too few thread samples at 1 kHz and py-spy's rate).",
    )
    load_concurrency: int = Field(
        default=4,
        ge=0,
        le=256,
        description="With handle: requests kept in flight "
        "during the window (random prompts of load_input_len tokens, load_output_len "
        "tokens each); 0 sends none, when you drive the load yourself (e.g. a "
        "serve_benchmark call at the same time). The load_* fields not given come "
        "from the last serve_benchmark on this handle (as handle= or baseline_handle=: its max_concurrency, "
        "input_len, output_len), else these defaults; the answer's load says which.",
    )
    load_input_len: int = Field(
        default=32,
        ge=1,
        le=1 << 17,
        description="With handle: prompt length of the "
        "load's requests, tokens. Shape the load like the workload under test: long "
        "prompts keep prefill (and a KV transfer) busy, long outputs keep decode busy.",
    )
    load_output_len: int = Field(
        default=16,
        ge=1,
        le=1 << 15,
        description="With handle: tokens asked per load "
        "request (max_tokens, EOS ignored where the engine allows).",
    )
    ranges: list[str] | None = Field(
        default=None,
        description="Named ranges to report (names joined by |, "
        "shell wildcards * and ? allowed, e.g. 'dispatch|combine' or 'kv_*'; not "
        "regular expressions); each must match a range that ran, "
        "else the error lists the ranges seen. Default: every range.",
    )
    overlap: list[list[str]] = Field(
        default_factory=list,
        description="Pairs of range sets to compare, each set "
        "names joined by | (wildcards * and ? allowed), e.g. [['kv_transfer', "
        "'dispatch|combine']]. Per pair: time each was active, time both were, "
        "overlap fraction of each, longest stretch of one without the other.",
    )
    top_k: int = Field(default=15, ge=1, le=200, description="Rows in each op table.")
    sample_threads: bool = Field(
        default=True,
        description="Watch the job's threads from outside (thread states "
        "from /proc at ~1 kHz, the GIL holder with py-spy): needed for running-time "
        "overlap and the GIL findings. Adds ~0.5 s to attach.",
    )
    gil_sample_hz: int = Field(
        default=500, ge=10, le=2000, description="py-spy's GIL-holder sampling rate, Hz."
    )
    timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=600,
        description="Wall-clock limit for the job, seconds: a "
        "workload still running then is killed with everything it started. With handle: "
        "the time allowed beyond duration_s (attaching, and the engine's export of the "
        "window, which grows with the ops in it; /stop_profile gets at least 30 s).",
    )
    _notes: list[str] = PrivateAttr(
        default_factory=list
    )  # what the input's reading changed, for the answer

    @model_validator(mode="after")
    def _shapes_alias(self):
        """`shapes` (the name microbench and check_numerics use) read as `shape`, with a note."""
        if self.shapes is None:
            return self
        if self.shape is not None:
            raise ValueError("give shape or shapes, not both (profile runs one shape)")
        shapes = self.shapes
        if isinstance(shapes, list):
            if len(shapes) != 1:
                raise ValueError(
                    f"profile runs one shape; shapes has {len(shapes)}: give shape={{...}} "
                    "(or shapes=[one]) and profile each shape in its own call"
                )
            shapes = shapes[0]
        self.shape, self.shapes = shapes, None
        self._notes.append("read shapes= as shape= (profile runs one shape; its field is `shape`)")
        return self


class LoadUsed(BaseModel):
    concurrency: int = Field(description="Requests kept in flight during the window.")
    input_len: int = Field(description="Prompt length of each request, tokens.")
    output_len: int = Field(description="Tokens asked per request.")
    source: str = Field(
        description="Where this load came from: the last serve_benchmark on this handle (as its "
        "handle or baseline_handle; its experiment id and workload), these arguments, or the defaults."
    )


class PythonStack(BaseModel):
    thread: str = Field(description="Thread, 'name (tid)'.")
    stack: str = Field(
        description="Its innermost Python frames, outer -> inner ('function (file:line)')."
    )
    share: float = Field(
        description="Share of py-spy's samples in the window that found this stack holding "
        "the GIL, 0..1."
    )


class OpRow(BaseModel):
    name: str = Field(description="Op name (aten::..., or a record_function name).")
    input_shapes: str = Field(
        description="Input shapes of this group, as torch.profiler prints them."
    )
    count: int = Field(description="Calls in the window.")
    self_ms: float = Field(
        description="Time in the op itself, children excluded, ms (summed over threads)."
    )
    total_ms: float = Field(description="Time in the op including the ops it called, ms.")
    self_pct: float = Field(
        description="self_ms as % of the profiled window's wall time (can pass 100 with "
        "several threads)."
    )
    total_pct: float = Field(description="total_ms as % of the window's wall time.")


class RangeStat(BaseModel):
    name: str = Field(description="Range name.")
    source: Literal["span", "record_function"] = Field(
        description="span: the stdlib helper (ia_worker.ranges); "
        "record_function: torch.profiler.record_function."
    )
    threads: list[str] = Field(description="Threads it ran on, as 'name (tid)'.")
    count: int = Field(description="How many times it ran.")
    total_ms: float = Field(description="Summed wall time, ms.")
    mean_ms: float = Field(description="Mean wall time per occurrence, ms.")
    on_cpu_ms: float | None = Field(
        default=None,
        description="Summed on-CPU time of its thread inside it, ms (time.thread_time; span only).",
    )


class ThreadStat(BaseModel):
    tid: int = Field(description="Thread id as the job sees it (threading.get_native_id()).")
    name: str = Field(description="Thread name (threading) or kernel comm.")
    process: str = Field(
        default="",
        description="handle=: the engine process it runs in (vLLM: "
        "api_server, engine_core, worker; builtin: engine); empty for a job.",
    )
    wall_in_ranges_ms: float = Field(description="Wall time inside any named range (union), ms.")
    on_cpu_ms: float | None = Field(
        description="On-CPU time (user+system) during the window, ms, from "
        "/proc/<pid>/task/<tid>/stat (10 ms ticks) or inside ranges when unsampled."
    )
    busy_fraction: float | None = Field(
        description="Share of the window it was on a CPU (host samples: state R "
        "minus run-queue waits), else on_cpu_ms / window; 0..1."
    )
    state_fractions: dict[str, float] = Field(
        default_factory=dict,
        description="Share of the window in each "
        "sampled state: running (on a CPU), cpu_wait (runnable, queued for a "
        "CPU), futex (asleep on a futex: the GIL or a lock), sleep "
        "(nanosleep), io (another named wait), other; empty when unsampled.",
    )
    gil_held_fraction: float | None = Field(
        default=None,
        description="Share of the window py-spy sampled it "
        "holding the GIL (samples / rate x window), 0..1; null when py-spy "
        "did not run.",
    )


class OverlapStat(BaseModel):
    a: str = Field(description="First range set (names joined by |, wildcards * and ?).")
    b: str = Field(description="Second range set.")
    a_threads: list[str] = Field(description="Threads A's ranges ran on.")
    b_threads: list[str] = Field(description="Threads B's ranges ran on.")
    basis: Literal["running", "intervals"] = Field(
        description="running: range time minus the time its thread "
        "made no progress (blocked on a futex: the GIL or a lock; or "
        "queued for a CPU), from host samples; intervals: the ranges' "
        "wall intervals as recorded. On a host with fewer free cores "
        "than busy threads, running overlap is bounded by the cores."
    )
    a_in_ranges_ms: float = Field(
        description="Wall time A's ranges were open (merged intervals), ms."
    )
    b_in_ranges_ms: float = Field(description="Wall time B's ranges were open, ms.")
    a_active_ms: float = Field(description="Time A was active on the basis above (merged), ms.")
    b_active_ms: float = Field(description="Time B was active, ms.")
    both_ms: float = Field(description="Time both were active, ms.")
    a_overlap_fraction: float | None = Field(
        description="both_ms / a_active_ms: share of A's time B ran too."
    )
    b_overlap_fraction: float | None = Field(description="both_ms / b_active_ms.")
    longest_a_without_b_ms: float = Field(
        description="Longest stretch with A active and B not, ms."
    )
    longest_b_without_a_ms: float = Field(
        description="Longest stretch with B active and A not, ms."
    )
    interval_a_overlap_fraction: float | None = Field(
        description="The same fraction over the raw wall intervals "
        "(a thread waiting for the GIL inside a range counts)."
    )


class GilWait(BaseModel):
    holder: str = Field(description="Thread sampled holding the GIL, 'name (tid)'.")
    waiter: str = Field(description="Thread blocked on a futex meanwhile.")
    waiter_ranges: str = Field(description="The waiter's range set during which this was measured.")
    holder_ranges: str = Field(description="The holder's range set.")
    fraction: float = Field(
        description="Share of the waiter's range time (less its waits for a CPU) it sat "
        "blocked on a futex while the holder's ranges were open, 0..1 (/proc samples)."
    )
    holder_gil_share: float = Field(
        description="Share of the window the holder was sampled holding the GIL, 0..1 "
        "(py-spy samples / rate x window)."
    )
    holder_gil_site: str = Field(
        description="Where the holder held the GIL most often: 'function (file:line)'."
    )


class Contention(BaseModel):
    method: str = Field(description="How threads were watched, in words.")
    proc_samples: int = Field(description="/proc sampling rounds over the job's lifetime.")
    gil_sampler: str = Field(description="'py-spy <version> at N Hz', or why it did not run.")
    waits: list[GilWait] = Field(
        default_factory=list, description="GIL holder/waiter pairs per overlap pair."
    )
    limits: str = Field(description="What this evidence cannot tell.")


class Finding(BaseModel):
    code: str = Field(
        description="Stable code, e.g. 'no_overlap', 'gil_contention', 'threads_not_profiled'."
    )
    layer: str = Field(
        description="Where the problem lives: 'python/GIL', 'native call', 'scheduling', ..."
    )
    message: str = Field(description="What was seen, with numbers.")
    evidence: str = Field(description="What the statement rests on and its limits.")
    next_experiment: str = Field(
        description="The cheapest next experiment that would confirm or fix it."
    )


class Output(ToolOutput):
    target: str = Field(
        description="What ran: 'kernel rmsnorm (reference)', 'workload file.py:fn', 'engine "
        "serve-... for 2 s, 6 requests in flight, 128 prompt + 3 output tokens each'."
    )
    window_ms: float = Field(description="Wall time of the profiled window, ms.")
    top_ops_by_self: list[OpRow] = Field(
        description="Top ops by self time (grouped by name and input shapes)."
    )
    top_ops_by_total: list[OpRow] = Field(description="Top ops by total time (children included).")
    gpu_kernels: list[dict] = Field(
        default_factory=list,
        description="CUDA kernels (name, count, total_us) from CUPTI when the job ran on a GPU.",
    )
    gpu_note: str = Field(default="", description="Why GPU kernel times are absent, when they are.")
    ops_threads: list[int] = Field(
        description="Thread ids torch.profiler recorded ops on (all threads are "
        "recorded: profile_all_threads)."
    )
    ranges: list[RangeStat] = Field(
        description="Every named range that ran (or those named in ranges=)."
    )
    threads: list[ThreadStat] = Field(
        description="Per thread: wall in ranges, on-CPU time, busy fraction, states."
    )
    overlaps: list[OverlapStat] = Field(default_factory=list, description="One per overlap pair.")
    contention: Contention | None = Field(
        default=None, description="Host-side thread and GIL sampling."
    )
    findings: list[Finding] = Field(
        default_factory=list,
        description="What to act on, each with the layer and the next cheapest experiment.",
    )
    finding_codes: list[str] = Field(default_factory=list, description="The findings' codes.")
    num_threads: int = Field(
        default=0, description="Threads seen (with ranges, or sampled from the host)."
    )
    python_stacks: list[PythonStack] = Field(
        default_factory=list,
        description="Where the Python time went: "
        "the stacks py-spy most often found holding the GIL in the "
        "window (code torch.profiler cannot see: the Triton "
        "interpreter, pure-Python loops).",
    )
    load: LoadUsed | None = Field(
        default=None, description="With handle: the load the window ran under."
    )
    phases_ms: dict[str, float] = Field(
        default_factory=dict,
        description="Where this call's time went, ms: "
        "with handle attach, load_setup (the load's prompts and its generator's process, made "
        "before the window opens), start_profile, load, "
        "stop_profile (of it, the engine's own engine_close: torch.profiler "
        "stopping, and engine_export: the window written out), read_window; "
        "else job (the sandbox job); judge in both.",
    )
    notes: list[str] = Field(
        default_factory=list, description="How the input was read (e.g. an alias)."
    )
