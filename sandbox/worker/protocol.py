"""The wire protocol across the trust boundary: what a job's payload holds, per op, and
what files a job writes. Both sides import this module, so the rule is written once.

Stdlib only: ``tools/`` (the judge, in the server) imports it, and so does every worker
op. ``tools/`` may import this module and ``sandbox.worker.shared``, never an op module
(``sandbox.worker.ops.*``): a test enforces it. Payloads are JSON; the types below
document them (TypedDict), they do not validate them: a worker's answer is checked for
form by the tool that reads it.
"""

from __future__ import annotations

from typing import Literal, TypedDict

# ---- ops (modules under sandbox/worker/ops/) -----------------------------------------

OP_REFERENCE = "reference"
OP_NUMERICS_RUN = "numerics_run"
OP_MICROBENCH = "microbench"
OP_COMPILE = "compile"
OP_COMPILE_CUDA = "compile_cuda"
OP_PEAKS = "peaks"
OP_DEVICE_PROBE = "device_probe"


# ---- what names code in a payload --------------------------------------------------


class CodePayload(TypedDict, total=False):
    """A function the worker loads: `entry` in a workspace file (`path`, as the job sees
    it) or in inline `source`."""

    entry: str
    path: str | None
    source: str | None
    file_name: (
        str  # how errors name the file (numerics_run), e.g. "vector_add/vector_add_triton.py"
    )


class ArgPayload(TypedDict):
    """One positional argument as kernels/schema.py's Arg declares it."""

    name: str
    shape: list[str | int]
    dtype: str | None
    distribution: str
    low: int
    high: int
    layout: str  # what the kernel accepts: "any" | "last_dim_contiguous" | "contiguous"


# ---- reference: seeded inputs and the reference's outputs -----------------------------


class ReferenceItem(TypedDict, total=False):
    key: str  # names the files: inputs_file(key), reference_file(key)
    shape: dict[str, int]
    dtype: str
    seed: int
    distribution: str | None
    layout: str  # sandbox/worker/layouts.py; absent: as made
    layout_args: list[int]  # the argument indices re-laid out in `layout`


class ReferencePayload(TypedDict):
    reference: CodePayload
    args: list[ArgPayload]
    make_inputs: CodePayload | None  # the spec's own generator, (shape, dtype, generator) -> list
    items: list[ReferenceItem]
    float64: bool  # run the reference in float64 where the dtype allows


# ---- numerics_run: the candidate on saved inputs ---------------------------------------


class PartitionPayload(TypedDict, total=False):
    args: dict[str, int]  # input index (as text) -> split dim
    num_parts: int
    combine: Literal["concat", "sum"]
    out_dim: int
    names: dict[str, int]  # argument name -> split dim (for people)
    sum_order: list[int]


# The pre-fill of outputs the candidate allocates (numerics_run): a quiet NaN whose payload
# no arithmetic produces, as raw bits per float dtype. Measured on x86 CPU (torch 2.13,
# Triton 3.9 interpreter): NaNs computed from finite values (0/0, inf-inf, sqrt(-1), a
# float32 NaN rounded down) are 0x7fc00000/0xffc00000 (float32), 0x7e00/0xfe00 (float16),
# 0x7fc0/0xffc0/0xffff (bfloat16), 0x7ff8.../0xfff8... (float64); GPUs produce the
# canonical 0x7fffffff/0x7fff family. A payload survives copies and stores bit for bit; an
# op reading the sentinel propagates it (that output came from unwritten memory too).
UNWRITTEN_FLOAT_BITS = {
    "float32": 0x7FC5A5A5,
    "float16": 0x7E5A,
    "bfloat16": 0x7FDA,
    "float64": 0x7FF80000A5A5A5A5,
}


# A launch configuration (sandbox/worker/launch_config.py): name -> value, e.g.
# {"BLOCK_N": 128, "num_warps": 4}; entry keyword arguments, constexprs or launch options.
LaunchConfig = dict[str, int | float | bool | str]


class NumericsRunPayload(TypedDict, total=False):
    candidate: CodePayload
    keys: list[str]  # trials of one case, in order; their inputs are inputs_file(key) in in/
    repeat: bool  # each trial twice (determinism) and a final RECHECK
    partition: PartitionPayload | None
    launch_config: LaunchConfig | None


# The calls numerics_run makes, per trial in this order, and once at the end.
CALL_FIRST = "first"  # the trial's inputs copied into the SAME buffers every trial
CALL_REPEAT = "repeat"  # fresh copies of the same inputs: bitwise determinism
CALL_RECHECK = "recheck"  # the first trial's inputs again, last: state carried across calls
COMPARED_CALLS = (CALL_FIRST, CALL_REPEAT, CALL_RECHECK)  # judged against the reference


def call_rank(rank: int) -> str:
    """The call kind of simulated tensor-parallel rank `rank` (its shard of the inputs)."""
    return f"rank{rank}"


def is_rank_call(kind: str) -> bool:
    return kind.startswith("rank") and kind[4:].isdigit()


# ---- microbench: raw timing samples -----------------------------------------------------


class ArmPayload(TypedDict, total=False):
    name: str  # "candidate" or "baseline"
    entry: str
    source: str | None
    path: str | None
    launch_config: LaunchConfig | None


class MicrobenchPayload(TypedDict, total=False):
    arms: list[ArmPayload]  # 1 or 2; the first is the candidate
    args: list[ArgPayload]
    shape: dict[str, int]
    dtype: str
    make_inputs: CodePayload | None
    input_seeds: list[int]  # one per input set (at most this many sets)
    budget_ms: float
    min_timed_calls: int  # an arm with fewer at budget_ms's end keeps timing, up to max_budget_ms
    max_budget_ms: float
    target_rel_se: float
    decide_margin: float | None  # two arms: stop once their ratio is decided (racing), a fraction
    max_samples: int
    num_spot_checks: int
    order_seed: int
    cuda_graph: bool
    cpu_threads: int
    flush_bytes: int | None


# ---- the files a job writes (out/) and reads (in/) --------------------------------------


def inputs_file(key: str) -> str:
    """The inputs of trial `key` (reference op writes them; numerics_run reads them)."""
    return f"{key}.inputs.pt"


def reference_file(key: str) -> str:
    """The reference's outputs for trial `key`."""
    return f"{key}.ref.pt"


def output_file(key: str, kind: str) -> str:
    """The candidate's outputs of one call of numerics_run."""
    return f"{key}.{'out' if kind == CALL_FIRST else kind}.pt"


def inputs_after_file(key: str) -> str:
    """Trial `key`'s inputs as they were after the FIRST call (mutation check)."""
    return f"{key}.inputs_after.pt"


def spot_check_file(arm: str, k: int) -> str:
    """The outputs of microbench's k-th spot-checked timed call of `arm`."""
    return f"spot_{arm}_{k}.pt"


def input_set_key(index: int) -> str:
    """The reference item key of microbench input set `index` (for the spot-check)."""
    return f"set{index}"
