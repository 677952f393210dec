"""compile_kernel's agent-facing models: what it takes (Input) and what it answers (Output).

Field descriptions are the agent's manual: every number says its unit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from ..base import ToolInput, ToolOutput
from ..common.diff import Change
from ..common.launch_config import LaunchConfig, LaunchConfigApplied, launch_config_field
from .occupancy import DEFAULT_TARGET, TARGETS

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_CUDA_THREADS = 256


class Occupancy(BaseModel):
    warps_per_sm: int = Field(
        description="Theoretical resident warps per SM (AMD: wavefronts per CU) for "
        "this kernel's registers, shared memory and warps per block."
    )
    max_warps_per_sm: int = Field(
        description="The architecture's ceiling, warps per SM (AMD: waves per CU)."
    )
    blocks_per_sm: int = Field(
        description="Resident blocks (workgroups) per SM; 0 means the block cannot launch."
    )
    occupancy_pct: float = Field(description="warps_per_sm / max_warps_per_sm, in percent.")
    limiting_factor: str = Field(
        description="What caps occupancy: registers, shared_memory, warps (warps per "
        "block), blocks (resident block limit) or threads_per_block (too large)."
    )
    blocks_by: dict[str, int] = Field(
        default_factory=dict,
        description="Resident blocks per SM each limit "
        "alone would allow; the smallest is the limiting factor.",
    )


class InstructionMix(BaseModel):
    """Instruction counts in the SASS (NVIDIA) or AMDGCN (AMD) of one kernel by class: static
    (code size, a loop body counts once) unless `counts` says executed_estimate."""

    counts: Literal["static", "executed_estimate"] = Field(
        "static",
        description="'static': instructions "
        "in the code, a loop body counted once; "
        "'executed_estimate': per thread, each loop body "
        "x its trip count.",
    )
    tensor_core_mma: int = Field(
        0,
        description="Tensor-core matrix instructions (HMMA/HGMMA/QGMMA/IMMA/UTC*MMA; "
        "AMD v_mfma/v_wmma).",
    )
    ffma: int = Field(0, description="FP32 fused multiply-add (FFMA; AMD v_fma/v_fmac_f32).")
    fmul: int = Field(0, description="FP32 multiplies.")
    fadd: int = Field(0, description="FP32 adds.")
    half_fma: int = Field(
        0,
        description="Packed FP16/BF16 FMA (HFMA2, AMD v_pk_fma_f16): half-precision math "
        "only; the constant-load idiom HFMA2.MMA Rx, -RZ, RZ, a, b counts as a move.",
    )
    move: int = Field(
        0,
        description="Register moves, whatever unit runs them: MOV, UMOV, IMAD.MOV (RZ * RZ + x) "
        "and HFMA2(.MMA) Rx, -RZ, RZ, a, b (loads a constant, often zero); AMD v_mov/s_mov. Not math.",
    )
    mufu: int = Field(
        0,
        description="Special-function unit ops: exp2, rsqrt, rcp, sin... (MUFU; AMD v_exp/v_rsq...).",
    )
    global_load: int = Field(
        0, description="Global memory loads (LDG; AMD global_load/buffer_load)."
    )
    global_store: int = Field(
        0, description="Global memory stores (STG; AMD global_store/buffer_store)."
    )
    global_load_bits: dict[str, int] = Field(
        default_factory=dict,
        description="Global loads by access width in "
        "bits per thread, e.g. {'128': 4}: 128-bit = vectorised.",
    )
    global_store_bits: dict[str, int] = Field(
        default_factory=dict, description="Global stores by width in bits."
    )
    async_copy: int = Field(
        0, description="Asynchronous global->shared copies (LDGSTS, cp.async; AMD direct-to-LDS)."
    )
    bulk_copy: int = Field(0, description="Bulk / TMA copies (UBLKCP, UTMALDG, UTMASTG...).")
    shared_load: int = Field(0, description="Shared-memory loads (LDS, LDSM; AMD ds_read).")
    shared_store: int = Field(0, description="Shared-memory stores (STS, STSM; AMD ds_write).")
    local_load: int = Field(
        0, description="Local-memory loads (LDL; AMD scratch_load): spills or stack arrays."
    )
    local_store: int = Field(0, description="Local-memory stores (STL; AMD scratch_store).")
    barrier: int = Field(0, description="Block-wide barriers (BAR; AMD s_barrier).")
    total: int = Field(0, description="All instructions except NOPs.")
    tensor_core_ops: dict[str, int] = Field(
        default_factory=dict,
        description="Each tensor-core opcode with its "
        "shape and types, e.g. {'HGMMA.64x128x16.F32': 8}.",
    )


class LoopReport(BaseModel):
    """One loop in the SASS (a back edge to a block that dominates it)."""

    index: int = Field(
        description="Position in address order, outermost first; loop_trip_counts= keys."
    )
    source: str | None = Field(
        None,
        description="Source line of the loop's back-edge branch, e.g. "
        "'kda_decode_triton.py:94' (the `for` statement); null without line info.",
    )
    header_address: str = Field(
        description="SASS address of the loop's first instruction, e.g. '0x0ce0'."
    )
    end_address: str = Field(
        description="SASS address of its last instruction (usually the back-edge BRA)."
    )
    depth: int = Field(description="Nesting depth: 0 outermost, 1 inside one other loop, ...")
    parent: int | None = Field(
        None, description="index of the innermost enclosing loop; null: outermost."
    )
    body: InstructionMix = Field(
        description="Static mix of the body, inner loops included once: the "
        "instructions one trip issues per thread (an inner loop's trip aside)."
    )
    trip_count: int | None = Field(
        None, description="Times the body runs per program; null: unknown."
    )
    trip_count_from: Literal["ttir", "given", "unknown"] = Field(
        description="'ttir': the scf.for bounds "
        "with the launch's scalars; 'given': "
        "loop_trip_counts=; 'unknown'."
    )
    trip_count_how: str = Field(
        description="e.g. 'range(0, V=128, 32)', or why the count is unknown."
    )


class LaunchShape(BaseModel):
    """The launch the spec's launcher made on the example shape (intercepted, never run)."""

    grid: list[int] = Field(description="Programs (blocks) along x, y, z.")
    programs: int = Field(description="Programs per launch: the product of grid.")
    output: str | None = Field(
        None,
        description="The output tensor per-output counts are per element of: "
        "the kernel's first tensor argument the launcher allocated (shares no "
        "storage with an input), by parameter name; null: none (in place).",
    )
    output_elements: int | None = Field(None, description="Elements of that output tensor.")
    outputs_per_program: float | None = Field(None, description="output_elements / programs.")
    scalar_args: dict[str, int] = Field(
        default_factory=dict,
        description="Integer arguments passed, e.g. {'V': 128}: what loop bounds resolve against.",
    )


class ExecutedEstimate(BaseModel):
    """Instructions a program executes: the static mix with each loop body x its trip count."""

    per_thread: InstructionMix = Field(
        description="Executed per thread (counts='executed_estimate')."
    )
    per_output: dict[str, float] | None = Field(
        None,
        description="Thread-instructions per element of "
        "launch.output, by class ('ffma', 'mufu', 'total', ...): "
        "per_thread x threads_per_block / outputs_per_program; "
        "null when the launch is unknown.",
    )
    assumes: str = Field(description="What the estimate takes for granted.")


class KernelResources(BaseModel):
    name: str = Field(description="Kernel function name as the compiler emitted it.")
    registers_per_thread: int = Field(
        description="NVIDIA: 32-bit registers per thread (cuobjdump REG). AMD: "
        "VGPRs per lane, arch + accumulation (AGPRs) together: the compiler's .vgpr_count "
        "(TotalNumVgprs), the unified register file of gfx942/gfx950."
    )
    shared_memory_bytes: int = Field(
        description="Shared memory (AMD: LDS) per block, static + dynamic, bytes."
    )
    static_shared_memory_bytes: int = Field(
        description="Declared in the binary (cuobjdump SHARED / AMD group "
        "segment), bytes per block."
    )
    dynamic_shared_memory_bytes: int = Field(
        description="Requested at launch (Triton metadata.shared), bytes per block."
    )
    local_memory_bytes: int = Field(
        description="Local memory per thread outside the stack (cuobjdump LOCAL; AMD "
        "scratch per lane), bytes."
    )
    stack_frame_bytes: int | None = Field(
        None, description="Per-thread stack frame (ptxas), bytes; spills land here."
    )
    spill_stores_bytes: int | None = Field(
        None,
        description="Bytes of register spill stores per thread (ptxas -v); "
        "None for AMD (see spilled_registers).",
    )
    spill_loads_bytes: int | None = Field(
        None, description="Bytes of register spill loads per thread (ptxas -v)."
    )
    spilled_registers: int | None = Field(
        None, description="AMD: VGPRs + SGPRs spilled to scratch."
    )
    sgprs: int | None = Field(None, description="AMD: scalar registers per wave.")
    barriers: int | None = Field(None, description="NVIDIA: named barriers used (ptxas).")
    num_warps: int = Field(description="Warps (AMD: wavefronts) per block.")
    threads_per_block: int = Field(description="num_warps x warp size.")
    num_stages: int | None = Field(None, description="Triton software-pipelining stages.")
    occupancy: Occupancy
    instruction_mix: InstructionMix
    signature: dict[str, str] = Field(
        default_factory=dict, description="Argument types compiled for."
    )
    constexprs: dict = Field(
        default_factory=dict, description="Compile-time constants compiled with."
    )
    loops: list[LoopReport] = Field(
        default_factory=list,
        description="Loops in the SASS (NVIDIA), with "
        "their body's static mix and trip count. instruction_mix counts each "
        "body once.",
    )
    launch: LaunchShape | None = Field(
        None,
        description="Grid and output of the spec's launch; null "
        "without a launcher (signature= given).",
    )
    executed_estimate: ExecutedEstimate | None = Field(
        None,
        description="Executed counts per thread and "
        "per output element; null when a loop's trip count "
        "is unknown (see loops).",
    )


class Input(ToolInput):
    kernel: str | None = Field(
        None,
        description="Kernel spec name (list_kernels). Alone: compile its impl. With "
        "source=/path=: your variant, launched like the spec (its example shapes infer "
        "the signature).",
    )
    impl: str | None = Field(
        None,
        description="Which implementation of the spec to compile (describe_kernel; "
        "default: 'triton' if the spec has it, else its first).",
    )
    source: str | None = Field(
        None, description="Inline kernel source: Python with @triton.jit, or CUDA C++."
    )
    path: str | None = Field(
        None, description="A workspace file instead of source= (.py Triton, .cu CUDA C++)."
    )
    language: Literal["triton", "cuda"] | None = Field(
        None,
        description="'triton' or 'cuda' (CUDA C++ via "
        "nvcc); default: from the file suffix or the source.",
    )
    entry: str | None = Field(
        None,
        description="The @triton.jit function to compile (default: the one the "
        "launcher launches, else the first in the file). CUDA C++: report only this "
        "__global__ function. A Python wrapper's name here is used as the launcher.",
    )
    launcher: str | None = Field(
        None,
        description="Python wrapper that launches the kernel; it is run on "
        "uninitialised tensors of the spec's example shape to infer signature, constexprs and "
        "num_warps as a real launch would (default: the spec impl's function).",
    )
    signature: dict[str, str] | None = Field(
        None,
        description="Explicit argument types instead of inference, "
        "e.g. {'x_ptr': '*fp16', 'N': 'i32', 'eps': 'fp32'}; pointers "
        "are assumed 16-byte aligned, as torch allocations are.",
    )
    constexprs: dict[str, int | float | bool | str] | None = Field(
        None,
        description="tl.constexpr values, "
        "e.g. {'BLOCK_N': 1024}; with a launcher they "
        "override what it passes (and @autotune's "
        "first config, which is used otherwise).",
    )
    launch_config: LaunchConfig | None = launch_config_field(
        "the launcher's",
        "Here it is applied to the launch compile_kernel captures from the launcher (kernel= "
        "with impl=, or launcher=), or with signature= to the kernel itself; constexprs=, "
        "num_warps= and num_stages= win over the same name in it.",
    )
    shape: dict[str, int] | None = Field(
        None,
        description="Example sizes for inference, e.g. {'M': 1, 'N': 4096} "
        "(default: the spec's first GPU shape). Memory is reserved, never touched.",
    )
    shapes: list[dict[str, int]] | None = Field(
        None,
        description="The other tools' name for shape=, "
        "accepted here with exactly one shape, e.g. [{'M': 1, "
        "'N': 4096}]: a compile has one example shape.",
    )
    dtype: str | None = Field(
        None, description="Example dtype for inference (default: the spec's first)."
    )
    loop_trip_counts: dict[str, int] | None = Field(
        None,
        description="Trip counts (times the body runs per "
        "program) for loops, keyed by the loop's index or "
        "source line as `loops` lists them, e.g. {'0': 4} or "
        "{'my_kernel.py:94': 4}; they replace what the TTIR "
        "gives, and fill in what it cannot.",
    )
    target: str | None = Field(
        None,
        description=f"One of {', '.join(TARGETS)}. Default: this host's GPU, "
        f"else {DEFAULT_TARGET}.",
    )
    num_warps: int | None = Field(
        None, ge=1, le=32, description="Warps per block (overrides the launcher's)."
    )
    num_stages: int | None = Field(
        None, ge=1, le=8, description="Software-pipelining stages (overrides)."
    )
    threads_per_block: int | None = Field(
        None,
        ge=32,
        le=1024,
        description="CUDA C++ only: block size you "
        f"launch with, for occupancy (default {DEFAULT_CUDA_THREADS}).",
    )
    nvcc_flags: list[str] = Field(
        default_factory=list,
        description="CUDA C++ only: extra nvcc flags, e.g. "
        "['-O3', '--use_fast_math', '-maxrregcount=64'].",
    )
    baseline: str | None = Field(
        None,
        description="Compare with: an experiment_id of an earlier compile_kernel "
        "call, or another source compiled the same way. The diff lists what moved.",
    )
    timeout_s: float = Field(
        DEFAULT_TIMEOUT_S, gt=0, le=600, description="Wall-clock limit per compile job, s."
    )

    @model_validator(mode="after")
    def _one_name_for_the_shape(self) -> Input:
        """shapes= (every other tool's name) is shape= here when it holds one shape; the same
        validator fits any one-shape tool (profile)."""
        if self.shapes is None:
            return self
        if self.shape is not None:
            raise ValueError("give the example shape once: shape={...} or shapes=[{...}], not both")
        if len(self.shapes) != 1:
            raise ValueError(
                f"compile_kernel compiles for one example shape and shapes= has {len(self.shapes)}; "
                "give one, e.g. shape={'B': 1, 'H': 32} (or shapes=[{...}]), and compile again "
                "for another"
            )
        self.shape, self.shapes = self.shapes[0], None
        return self


class Output(ToolOutput):
    target: str = Field(description="Target compiled for, e.g. 'sm_90a', 'gfx942'.")
    arch: str = Field(description="Architecture the compiler actually emitted, e.g. 'sm_90a'.")
    backend: str = Field(description="'cuda' (NVIDIA) or 'hip' (AMD).")
    language: str = Field(description="'triton' or 'cuda'.")
    kernels: list[KernelResources] = Field(description="One entry per compiled kernel function.")
    cached: bool = Field(
        description="True when this answer came from the workspace's compile cache "
        "(same source, target and options as an earlier compile)."
    )
    compile_s: float = Field(
        description="Compiler wall time of the (original) compile, in seconds."
    )
    notes: list[str] = Field(
        default_factory=list,
        description="What could not be measured and why (e.g. "
        "no SASS because nvdisasm failed); empty when every number above is the compiler's.",
    )
    baseline: str | None = Field(None, description="What the diff compares against.")
    launch_config_applied: LaunchConfigApplied | None = Field(
        None,
        description="Where launch_config's names went in the captured launch; null without a "
        "launch_config or a launcher.",
    )
    diff: list[Change] = Field(
        default_factory=list,
        description="Fields that differ from the baseline "
        "(first kernel of each): registers, spills, smem, occupancy, instruction counts.",
    )
