"""y = rmsnorm(x) * weight * silu(gate), BLOCK_M rows per program, FP32 throughout.

The output layer of a linear-attention block (Gated DeltaNet, KDA) normalises each
head's readout over its V channels and gates it with SiLU of a projection of the input.
Rows are short there (V = 128), so one program takes several rows: one row per program
would leave most of a 4-warp block idle. The row statistic is FP32 whatever the input
dtype (the Triton interpreter's bf16 arithmetic is wrong anyway); y is rounded once.
"""

import torch
import triton
import triton.language as tl

EPS = 1e-6


@triton.jit
def rmsnorm_gated_kernel(
    x_ptr, z_ptr, w_ptr, y_ptr,
    M, N, stride_x_row, stride_z_row, stride_y_row, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + rows[:, None] * stride_z_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)  # [BLOCK_M]
    y = x * rstd[:, None] * w[None, :] * (z * tl.sigmoid(z))
    tl.store(y_ptr + rows[:, None] * stride_y_row + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # x, gate [M, N], weight [N] -> [M, N] in x's dtype
    assert x.ndim == 2 and gate.shape == x.shape and weight.shape == (x.shape[1],), "x, gate [M, N], weight [N]"
    assert x.stride(1) == 1 and gate.stride(1) == 1, "rows must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    BLOCK_N = triton.next_power_of_2(N)
    BLOCK_M = max(1, min(16, 2048 // BLOCK_N))  # ~2048 elements per program: 16 rows of a 128-wide head
    num_warps = min(max(BLOCK_M * BLOCK_N // 512, 1), 16)
    rmsnorm_gated_kernel[(triton.cdiv(M, BLOCK_M),)](
        x, gate, weight, y, M, N, x.stride(0), gate.stride(0), y.stride(0), EPS,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y
