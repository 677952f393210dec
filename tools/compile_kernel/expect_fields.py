"""What compile_kernel's `expect` conditions may name: the first kernel's resources, occupancy and
instruction counts (the kernel the diff compares), and with baseline= the same of the baseline's kernel.
Static counts are named as the mix names them (`ffma`); executed estimates per output element are
`executed_<class>_per_output` (null, so inconclusive, while a loop's trip count is unknown), and
constexprs are read with constexpr('BLOCK_V') / baseline_constexpr('BLOCK_V').

Compiler numbers are exact; a number the target does not report (AMD's sgprs on NVIDIA, spill
bytes on AMD) is null, so a condition on it is inconclusive.
"""

from __future__ import annotations

from ..common.expect import Catalogue, ExpectError, ExpectFields, Facts
from .sass import MIX_CLASSES
from .schema import Input, InstructionMix, KernelResources, LaunchShape, Occupancy, Output

RESOURCE_FIELDS = (
    "registers_per_thread",
    "shared_memory_bytes",
    "static_shared_memory_bytes",
    "dynamic_shared_memory_bytes",
    "local_memory_bytes",
    "stack_frame_bytes",
    "spill_stores_bytes",
    "spill_loads_bytes",
    "spilled_registers",
    "sgprs",
    "barriers",
    "num_warps",
    "threads_per_block",
    "num_stages",
)
OCCUPANCY_FIELDS = ("occupancy_pct", "warps_per_sm", "blocks_per_sm", "limiting_factor")
MIX_FIELDS = MIX_CLASSES  # every instruction class the SASS/AMDGCN mix counts

EXECUTED_CLASSES = (
    "ffma",
    "fmul",
    "fadd",
    "half_fma",
    "tensor_core_mma",
    "mufu",
    "global_load",
    "global_store",
    "shared_load",
    "shared_store",
    "local_load",
    "local_store",
)
LAUNCH_FIELDS = ("programs", "output_elements", "outputs_per_program")

KERNEL_FIELDS = {
    **{name: KernelResources.model_fields[name].description for name in RESOURCE_FIELDS},
    **{name: Occupancy.model_fields[name].description for name in OCCUPANCY_FIELDS},
    **{
        name: "SASS/AMDGCN count: " + InstructionMix.model_fields[name].description
        for name in MIX_FIELDS
    },
    "instructions_total": InstructionMix.model_fields["total"].description,
    "global_load_128_bit": "Global loads 128 bits wide per thread (vectorised), count.",
    "global_store_128_bit": "Global stores 128 bits wide per thread (vectorised), count.",
    **{
        f"executed_{name}_per_output": f"{name} executed per output element, thread-instructions (estimate: "
        "loop bodies x trip counts; null while a trip count or the launch is unknown)"
        for name in EXECUTED_CLASSES
    },
    "executed_instructions_per_output": "all instructions (NOPs aside) executed per output element, estimate",
    **{name: LaunchShape.model_fields[name].description for name in LAUNCH_FIELDS},
    "loops": "Loops in the SASS, count.",
    "loops_with_unknown_trip_count": "Loops whose trip count neither the TTIR nor loop_trip_counts= gave, count.",
}
CATALOGUE = Catalogue(
    fields={
        **KERNEL_FIELDS,
        "kernel_name": "Name of the kernel these numbers are about (the first compiled).",
        "num_kernels": "Kernel functions compiled.",
        "target": Output.model_fields["target"].description,
        "arch": Output.model_fields["arch"].description,
        "cached": Output.model_fields["cached"].description,
        "compile_s": Output.model_fields["compile_s"].description,
    },
    functions={
        "constexpr(name)": "a constexpr this kernel was compiled with, e.g. constexpr('BLOCK_V') == 32",
        "baseline_constexpr(name)": "the same of the baseline's kernel, e.g. "
        "constexpr('BLOCK_V') < baseline_constexpr('BLOCK_V')",
    },
)


def facts(inp: Input, out: Output, base: KernelResources | None) -> Facts:
    """`base`: the baseline's kernel the diff compared against (run() hands it back), or None."""
    fields = {
        **kernel_fields(out.kernels[0]),
        "kernel_name": out.kernels[0].name,
        "num_kernels": len(out.kernels),
        "target": out.target,
        "arch": out.arch,
        "cached": out.cached,
        "compile_s": out.compile_s,
    }
    functions = {
        "constexpr": _constexpr_of(out.kernels[0], "this kernel"),
        "baseline_constexpr": _constexpr_of(base, "the baseline's kernel"),
    }
    return Facts(
        fields=fields,
        functions=functions,
        baseline=None if base is None else Facts(fields=kernel_fields(base)),
    )


def _constexpr_of(k: KernelResources | None, whose: str):
    def constexpr(*names):
        if len(names) != 1 or not isinstance(names[0], str):
            raise ExpectError("constexpr takes one name in quotes, e.g. constexpr('BLOCK_V')")
        if k is None:
            raise ExpectError("baseline_constexpr needs baseline=")
        if names[0] not in k.constexprs:
            raise ExpectError(
                f"{whose} has no constexpr {names[0]!r}; it has: {', '.join(k.constexprs) or 'none'}"
            )
        return k.constexprs[names[0]]

    return constexpr


def kernel_fields(k: KernelResources) -> dict:
    mix = k.instruction_mix
    estimate = k.executed_estimate
    per_output = (estimate.per_output if estimate is not None else None) or {}
    return {
        **{name: getattr(k, name) for name in RESOURCE_FIELDS},
        **{name: getattr(k.occupancy, name) for name in OCCUPANCY_FIELDS},
        **{name: getattr(mix, name) for name in MIX_FIELDS},
        "instructions_total": mix.total,
        "global_load_128_bit": mix.global_load_bits.get("128", 0),
        "global_store_128_bit": mix.global_store_bits.get("128", 0),
        **{f"executed_{name}_per_output": per_output.get(name) for name in EXECUTED_CLASSES},
        "executed_instructions_per_output": per_output.get("total"),
        **{
            name: getattr(k.launch, name) if k.launch is not None else None
            for name in LAUNCH_FIELDS
        },
        "loops": len(k.loops),
        "loops_with_unknown_trip_count": sum(1 for loop in k.loops if loop.trip_count is None),
    }


EXPECT = ExpectFields(CATALOGUE, facts)
