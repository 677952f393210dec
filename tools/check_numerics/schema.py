"""check_numerics' agent-facing models: what it takes (Input) and what it answers (Output).

Field descriptions are the agent's manual: every number says its unit or its metric.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ...kernels.coderef import DEFAULT_IMPL_RULE
from ..base import ToolInput, ToolOutput
from ..common.cases import MAX_NUMERICS_CASES
from ..common.launch_config import LaunchConfig, LaunchConfigApplied, launch_config_field

# check name (the `checks` input) -> finding codes it controls
CHECKS: dict[str, tuple[str, ...]] = {
    "unwritten": ("unwritten_output", "nonfinite_output"),
    "mutation": ("input_mutation",),
    "aliasing": ("output_aliases_input",),
    "tensor_type": ("not_plain_tensor", "wrong_output"),
    "determinism": ("nondeterministic",),
    "caching": ("result_caching", "stateful_output"),
    "op_audit": (
        "forbidden_op",
        "library_ops_in_custom_kernel",
        "fallback_to_library",
        "no_triton_launch",
    ),
    "tampering": ("comparison_tampering",),
    "precision": ("lower_precision_than_declared", "interpreter_bf16_suspect"),
    "degenerate": ("constant_output", "degenerate_reference"),
}


CheckName = Literal[
    "unwritten",
    "mutation",
    "aliasing",
    "tensor_type",
    "determinism",
    "caching",
    "op_audit",
    "tampering",
    "precision",
    "degenerate",
]


class ArgInput(BaseModel):
    name: str = Field(description="Positional argument name.")
    shape: list[str | int] = Field(
        description="Dimension names (sized by each shape) or fixed ints, e.g. ['M', 'N']."
    )
    dtype: str | None = Field(
        default=None, description="Pinned dtype (e.g. 'int32'); null takes the case dtype."
    )
    distribution: Literal["normal", "uniform", "positive", "int"] = Field(
        default="normal", description="How values are drawn."
    )
    low: int = Field(
        default=0, ge=-(2**62), le=2**62, description="Integer arguments: smallest value drawn."
    )
    high: int = Field(
        default=2**16,
        ge=-(2**62),
        le=2**62,
        description="Integer arguments: one past the largest value drawn.",
    )
    layout: Literal["any", "last_dim_contiguous", "contiguous"] = Field(
        default="last_dim_contiguous",
        description="What the kernel accepts for this argument, so which `layouts` are tried on "
        "it: 'last_dim_contiguous' (padded_rows), 'any' (also strided_last_dim, transposed), "
        "'contiguous' (only as made).",
    )


class PartitionInput(BaseModel):
    args: dict[str, int] = Field(
        min_length=1,
        max_length=64,
        description="Argument name -> dimension split "
        "across ranks (at least one); others are replicated.",
    )
    num_parts: int = Field(
        default=2, ge=2, le=64, description="Number of simulated tensor-parallel ranks."
    )
    combine: Literal["concat", "sum"] = Field(
        default="concat",
        description="'concat' rank outputs along out_dim, or "
        "'sum' them in rank order in the output dtype (an all-reduce).",
    )
    out_dim: int = Field(
        default=0,
        ge=-64,
        le=63,
        description="Output dimension for 'concat' (negative counts "
        "from the last; must exist in the output).",
    )
    sum_order: list[int] | None = Field(
        default=None,
        description="For 'sum': the order ranks are added in, a "
        "permutation of 0..num_parts-1 (default rank order); float addition is not "
        "associative, so the order is part of the all-reduce's numerics.",
    )


class Input(ToolInput):
    kernel: str | None = Field(
        default=None,
        description="Kernel name from list_kernels; supplies reference, shapes, "
        "dtypes, tolerances, partition and forbidden ops.",
    )
    impl: str | None = Field(
        default=None,
        description=f"Implementation of the kernel to check (default: {DEFAULT_IMPL_RULE}).",
    )
    source: str | None = Field(
        default=None, description="Candidate as inline Python source (with entry=)."
    )
    path: str | None = Field(
        default=None, description="Candidate as a workspace file (with entry=)."
    )
    entry: str | None = Field(default=None, description="Function to call in source/path.")
    reference: str | None = Field(
        default=None,
        description="Override the reference: 'file.py:fn' (kernel folder or "
        "workspace root) or Python source. On a locked kernel the verdict cannot pass.",
    )
    reference_entry: str | None = Field(
        default=None, description="Function name when reference= is source."
    )
    args: list[ArgInput] | None = Field(
        default=None, description="Argument declarations for ad-hoc code without kernel=."
    )
    shapes: list[dict[str, int]] | None = Field(
        default=None,
        description="Named sizes per case, e.g. "
        "[{'M': 4, 'N': 64}]; default: the spec's CPU or GPU set. Repeats "
        f"are dropped; at most {MAX_NUMERICS_CASES} cases (shapes x dtypes) "
        "per call.",
    )
    dtypes: list[str] | None = Field(
        default=None,
        description="float32, float16, bfloat16, float64, or tf32 (float32 "
        "tensors judged at TF32 tolerance); default: the spec's.",
    )
    trials: int = Field(
        default=3,
        ge=1,
        le=20,
        description="Fresh random inputs per case (each its own seed). The "
        "ceiling of 20 is for safety: a call runs cases x trials, each case job within timeout_s, "
        "and reports progress per case.",
    )
    tolerance: float | None = Field(
        default=None,
        gt=0,
        le=1.0,
        description="Relative L2 tolerance for every case, "
        "overriding spec and dtype defaults (reported as source 'argument'); at most 1 "
        "(an all-zero output is already at 1).",
    )
    distribution: Literal["normal", "uniform", "large", "tiny", "constant_row"] | None = Field(
        default=None,
        description="Value distribution of float inputs: N(0,1), U[-1,1), x1e4, x1e-4, "
        "first row constant.",
    )
    partition: bool | PartitionInput | None = Field(
        default=None,
        description="Simulated tensor-parallel ranks: "
        "true for the spec's partition, false for none, or an explicit "
        "one; default: the spec's if any.",
    )
    checks: list[CheckName] | None = Field(
        default=None,
        description="Integrity checks to run (default all): " + ", ".join(CHECKS) + ".",
    )
    layouts: list[Literal["padded_rows", "strided_last_dim", "transposed"]] = Field(
        default=["padded_rows"],
        max_length=3,
        description="Input layouts tried besides each case as made (values unchanged, a case "
        "of its own, labelled with the layout): 'padded_rows' (each tensor a view into a "
        "larger buffer: dimension 0's stride padded by 16 elements, storage offset 16, last "
        "dimension contiguous: a slice of a fused projection), 'strided_last_dim' (elements 2 "
        "apart), 'transposed' (last two dimensions swapped in memory). Padding holds NaN. Only "
        "arguments whose declared layout accepts it are re-laid out. [] tries none.",
    )
    layout_shapes: Literal["smallest", "all"] = Field(
        default="smallest",
        description="Which shapes `layouts` are tried on: the smallest shape of each dtype "
        "(default: catches a stride bug at little cost) or all.",
    )
    launch_config: LaunchConfig | None = launch_config_field()
    timeout_s: float = Field(
        default=300,
        gt=0,
        le=3600,
        description="Wall-clock limit per case job, in seconds; "
        "the ceiling of 3,600 is for safety (a hung candidate is killed there).",
    )


UNDEFINED = (
    " Null when the candidate has NaN/Inf elements where the reference is finite (an unwritten "
    "element, an overflow) or the reverse: the error there is unbounded, so this number is "
    "undefined, never the error of the finite elements alone (nonfinite_mismatches counts them; "
    "the case fails; an `expect` on it is inconclusive)."
)


class ErrorStats(BaseModel):
    max_abs_error: float | None = Field(
        description="Largest |cand - ref|, in the output's units." + UNDEFINED
    )
    max_rel_error: float | None = Field(
        description="Largest |cand - ref| / |ref| over nonzero-reference elements, unitless."
        + UNDEFINED
    )
    rel_l2_error: float | None = Field(
        description="||cand - ref|| / ||ref|| over the output (the verdict's metric), unitless; "
        "null when undefined: an all-zero reference." + UNDEFINED
    )
    ulp_p50: float | None = Field(
        description="Median error in ULPs of the output dtype at the reference value." + UNDEFINED
    )
    ulp_p99: float | None = Field(
        description="99th-percentile error in ULPs of the output dtype." + UNDEFINED
    )
    ulp_max: float | None = Field(
        description="Largest error in ULPs of the output dtype." + UNDEFINED
    )
    num_mismatches: int = Field(
        description="Elements whose error exceeds tolerance x (|ref| + rms(ref)), or NaN/Inf "
        "where ref is finite."
    )
    first_mismatch_indices: list[list[int]] = Field(
        description="Up to 5 mismatching element indices, in order."
    )
    nonfinite_mismatches: int = Field(
        description="Elements NaN/Inf in the candidate but not in the reference (or vice versa)."
    )
    candidate_nan_count: int = Field(description="NaN elements in the candidate's output.")
    candidate_inf_count: int = Field(description="Inf elements in the candidate's output.")
    reference_nonfinite_count: int = Field(description="NaN/Inf elements in the reference.")
    worst_index: list[int] = Field(
        description="Index of the worst element (first non-finite mismatch, else largest "
        "scaled error)."
    )
    worst_candidate: float | None = Field(description="Candidate value there (null if NaN/Inf).")
    worst_reference: float | None = Field(description="Reference value there (float64).")
    trial: int = Field(description="Trial (0-based) these numbers come from: the worst one.")
    output_index: int = Field(description="Which output of the entry function.")


class PartitionReport(BaseModel):
    args: dict[str, int] = Field(description="Argument -> split dimension.")
    num_parts: int = Field(description="Simulated ranks.")
    combine: str = Field(description="'concat' or 'sum'.")
    sum_order: list[int] = Field(description="Order the ranks' outputs were added in ('sum').")
    partitioned_vs_reference_rel_l2: float | None = Field(
        description="Ranks combined vs float64 reference (rel L2)."
    )
    unpartitioned_vs_reference_rel_l2: float | None = Field(
        description="One call on the whole input vs reference (rel L2)."
    )
    partitioned_vs_unpartitioned_rel_l2: float | None = Field(
        description="Ranks combined vs one whole call (rel L2). "
        "Beyond the tolerance (or only the partitioned run "
        "missing the reference) is a partition_mismatch; a "
        "miss both runs share is the case's ordinary verdict."
    )
    partitioned_vs_unpartitioned_max_abs: float | None = Field(
        description="Largest |partitioned - unpartitioned|."
    )
    most_divergent_index: list[int] = Field(
        default_factory=list, description="Element where partitioned and unpartitioned differ most."
    )
    most_divergent_partitioned: float | None = Field(
        default=None, description="Partitioned value there."
    )
    most_divergent_unpartitioned: float | None = Field(
        default=None, description="Unpartitioned value there."
    )
    most_divergent_reference: float | None = Field(
        default=None, description="Reference value there."
    )
    is_within_tolerance: bool = Field(
        description="Partitioned within tolerance of both the reference and the unpartitioned call."
    )


class InputLayout(BaseModel):
    name: str = Field(description="Argument name (or its index).")
    shape: list[int] = Field(description="Sizes, in elements.")
    stride: list[int] = Field(description="Strides the kernel got, in elements.")
    storage_offset: int = Field(description="Offset into its storage, in elements.")
    shares_storage_with: list[str] = Field(
        default_factory=list, description="Other arguments that are views of the same storage."
    )


class CaseReport(BaseModel):
    case: str = Field(
        description="Shape and dtype, e.g. 'M=4 N=64 float32', then the layout unless as made."
    )
    shape: dict[str, int] = Field(description="Named sizes.")
    dtype: str = Field(description="Case dtype.")
    layout: str = Field(
        default="as_made",
        description="Input layout this case ran with: 'as_made' (exactly as the spec makes the "
        "inputs), 'padded_rows', 'strided_last_dim' or 'transposed' (see the `layouts` input).",
    )
    input_layouts: list[InputLayout] = Field(
        default_factory=list,
        description="Each input as the candidate got it (trial 0): shape, strides, storage "
        "offset, shared storage.",
    )
    verdict: Literal["pass", "fail", "inconclusive"] = Field(
        description="This case's verdict (numerics and error findings)."
    )
    tolerance_rel_l2: float = Field(description="Relative L2 tolerance applied.")
    tolerance_max_abs: float | None = Field(description="Absolute tolerance applied, if any.")
    tolerance_source: str = Field(description="'argument', 'spec' or 'dtype default'.")
    tolerance_why: str = Field(description="Why the tolerance is that size.")
    seeds: list[int] = Field(
        description="Seed of each trial's inputs (reproduce with these; the next ones are "
        "unpredictable)."
    )
    trial_rel_l2: list[float | None] = Field(
        description="Each trial's rel L2 error, the worst of its outputs (null: an unusable "
        "output, or NaN/Inf where the reference is finite: see ErrorStats.rel_l2_error)."
    )
    errors: ErrorStats | None = Field(
        description="The worst trial's error numbers (null: no usable output)."
    )
    partition: PartitionReport | None = Field(
        default=None, description="Partition equivalence, when run."
    )
    aten_ops: dict[str, int] = Field(
        default_factory=dict,
        description="Op audit: aten ops the candidate dispatched "
        "in its first call of each trial, with counts (a Triton kernel under the "
        "interpreter shows only allocation/copy ops).",
    )
    triton_launches: int = Field(default=0, description="Triton kernel launches in those calls.")
    error: str | None = Field(
        default=None,
        description="Why this case has no result: the candidate raised on its "
        "first call (e.g. a kernel that does not compile for this dtype), with the kernel's "
        "file:line:col and source excerpt; the verdict is 'fail' and the other cases keep "
        "their results. Null when the case ran.",
    )


class LockReport(BaseModel):
    locked: bool = Field(
        description="A human locked this kernel's acceptance criteria (infra-agent lock)."
    )
    locked_at: str | None = Field(default=None, description="When (UTC).")
    problems: list[str] = Field(
        default_factory=list, description="What differs from the lock; any makes the verdict fail."
    )


class Finding(BaseModel):
    code: str = Field(
        description="What was found, e.g. 'unwritten_output', 'input_mutation', "
        "'partition_mismatch', 'layout_sensitive', 'reference_modified_since_lock'."
    )
    severity: Literal["error", "warning", "info"] = Field(
        description="'error': the verdict cannot pass; 'warning': worth a look, verdict unaffected."
    )
    message: str = Field(
        description="The trick or problem by name, and where it showed (case, "
        "argument, element index, ops)."
    )
    case: str | None = Field(
        default=None,
        description="The case (shape and dtype) it showed in; null for the whole call.",
    )


class Output(ToolOutput):
    verdict: Literal["pass", "fail", "inconclusive"] = Field(
        description="'pass' only if every case passes and no "
        "error finding; 'inconclusive' when the test is "
        "degenerate."
    )
    candidate: str = Field(description="What was checked.")
    device: str = Field(description="'cuda' or 'cpu' (Triton interpreted).")
    cases: list[CaseReport] = Field(description="One per (shape, dtype).")
    findings: list[Finding] = Field(
        description="Integrity findings, each naming the trick and where it showed."
    )
    lock: LockReport | None = Field(description="Pinned acceptance status (null: no kernel).")
    checks: list[str] = Field(description="Integrity checks that ran.")
    triton_compiles: int = Field(
        default=0,
        description="Triton cache entries (kernels and their launchers) this "
        "call's jobs compiled. On a GPU the candidate's jobs share one cache per call, and "
        "the built-in zoo's kernels a trusted one across calls, so this counts distinct "
        "kernels, not cases; 0 when Triton runs interpreted (CPU).",
    )
    launch_config_applied: LaunchConfigApplied | None = Field(
        default=None,
        description="Where launch_config's names went (the first case's candidate job); null "
        "without a launch_config.",
    )
    layout_notes: list[str] = Field(
        default_factory=list,
        description="Layouts asked for but not tried on some argument (its declared layout "
        "excludes them), and why.",
    )
