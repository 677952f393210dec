"""The tests' Triton matmul (compile_kernels/matmul.py, `tl.dot` on fp16 tiles) and what
compiling it takes: its source and launcher signature, and the payload of the low-level
compiler job for one target and tile."""

from __future__ import annotations

from pathlib import Path

from infra_agent.tools.compile_kernel.occupancy import TARGETS
from infra_agent.tools.compile_kernel.plan import plan_target_payload

KERNELS = Path(__file__).parent / "compile_kernels"
MATMUL_SOURCE = (KERNELS / "matmul.py").read_text()
MATMUL_SIGNATURE = {
    "a_ptr": "*fp16",
    "b_ptr": "*fp16",
    "c_ptr": "*fp16",
    "M": "i32",
    "N": "i32",
    "K": "i32",
    "stride_am": "i32",
    "stride_bk": "i32",
    "stride_cm": "i32",
}


def matmul_payload(target: str, block_m: int, block_n: int, block_k: int) -> dict:
    """The compiler job's payload for matmul_kernel on `target` (e.g. 'sm_90a', 'gfx942') with
    a block_m x block_n tile stepping block_k along K, 4 warps."""
    return {
        "source": MATMUL_SOURCE,
        "entry": "matmul_kernel",
        "signature": MATMUL_SIGNATURE,
        "constexprs": {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k},
        "options": {"num_warps": 4},
        "target": plan_target_payload(TARGETS[target]),
    }
