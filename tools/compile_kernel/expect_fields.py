"""What compile_kernel's `expect` conditions may name: the first kernel's resources, occupancy and
instruction counts (the kernel the diff compares), and with baseline= the same of the baseline's kernel.

Compiler numbers are exact; a number the target does not report (AMD's sgprs on NVIDIA, spill
bytes on AMD) is null, so a condition on it is inconclusive.
"""

from __future__ import annotations

from ..common.expect import Catalogue, Facts
from .schema import InstructionMix, KernelResources, Occupancy, Output

RESOURCE_FIELDS = ("registers_per_thread", "shared_memory_bytes", "static_shared_memory_bytes",
                   "dynamic_shared_memory_bytes", "local_memory_bytes", "stack_frame_bytes", "spill_stores_bytes",
                   "spill_loads_bytes", "spilled_registers", "sgprs", "barriers", "num_warps", "threads_per_block",
                   "num_stages")
OCCUPANCY_FIELDS = ("occupancy_pct", "warps_per_sm", "blocks_per_sm", "limiting_factor")
MIX_FIELDS = ("tensor_core_mma", "ffma", "fmul", "fadd", "half_fma", "move", "mufu", "global_load", "global_store",
              "async_copy", "bulk_copy", "shared_load", "shared_store", "local_load", "local_store", "barrier")

KERNEL_FIELDS = {
    **{name: KernelResources.model_fields[name].description for name in RESOURCE_FIELDS},
    **{name: Occupancy.model_fields[name].description for name in OCCUPANCY_FIELDS},
    **{name: "SASS/AMDGCN count: " + InstructionMix.model_fields[name].description for name in MIX_FIELDS},
    "instructions_total": InstructionMix.model_fields["total"].description,
    "global_load_128_bit": "Global loads 128 bits wide per thread (vectorised), count.",
    "global_store_128_bit": "Global stores 128 bits wide per thread (vectorised), count.",
}
CATALOGUE = Catalogue(fields={
    **KERNEL_FIELDS,
    "kernel_name": "Name of the kernel these numbers are about (the first compiled).",
    "num_kernels": "Kernel functions compiled.",
    "target": Output.model_fields["target"].description,
    "arch": Output.model_fields["arch"].description,
    "cached": Output.model_fields["cached"].description,
    "compile_s": Output.model_fields["compile_s"].description,
})


def facts(inp, out: Output) -> Facts:
    fields = {**kernel_fields(out.kernels[0]), "kernel_name": out.kernels[0].name, "num_kernels": len(out.kernels),
              "target": out.target, "arch": out.arch, "cached": out.cached, "compile_s": out.compile_s}
    base = out.baseline_kernel
    return Facts(fields=fields, baseline=None if base is None else Facts(fields=kernel_fields(base)))


def kernel_fields(k: KernelResources) -> dict:
    mix = k.instruction_mix
    return {
        **{name: getattr(k, name) for name in RESOURCE_FIELDS},
        **{name: getattr(k.occupancy, name) for name in OCCUPANCY_FIELDS},
        **{name: getattr(mix, name) for name in MIX_FIELDS},
        "instructions_total": mix.total,
        "global_load_128_bit": mix.global_load_bits.get("128", 0),
        "global_store_128_bit": mix.global_store_bits.get("128", 0),
    }
