"""y = x @ w.T with the K loop's products in emulated TF32 or in 3xTF32.

TF32 keeps 10 of float32's 23 mantissa bits. Tensor cores round operands to TF32 and
accumulate in FP32; the Triton interpreter does not emulate that (it computes
`input_precision="tf32"` in full FP32), so the operands are truncated here with a bit
mask and multiplied with an IEEE dot: the products of two 11-bit significands are exact
in FP32, so the only error is the operands' truncation, as on the hardware.

3xTF32 splits each operand into hi = tf32(v) and lo = tf32(v - hi) and sums three
products, lo*hi + hi*lo + hi*hi (small terms first); only lo*lo (~2^-22 relative) and
lo's own truncation are lost, which brings the result back to FP32 accuracy.

Row-parallel tensor parallelism splits K across ranks; each rank runs this kernel on
its K-slice and the partial outputs are summed (an all-reduce).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _tf32(v):
    # keep sign, exponent and the top 10 mantissa bits: 0xFFFFE000 as int32
    return (v.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)


@triton.jit
def linear_kernel(
    x_ptr, w_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT3: tl.constexpr,  # False: TF32 operands; True: 3xTF32
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)  # [BLOCK_M, BLOCK_K]
        b = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0.0)  # [BLOCK_K, BLOCK_N]
        a_hi = _tf32(a)
        b_hi = _tf32(b)
        if SPLIT3:
            a_lo = _tf32(a - a_hi)
            b_lo = _tf32(b - b_hi)
            acc += tl.dot(a_lo, b_hi, input_precision="ieee")
            acc += tl.dot(a_hi, b_lo, input_precision="ieee")
        acc += tl.dot(a_hi, b_hi, input_precision="ieee")
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _linear(x: torch.Tensor, w: torch.Tensor, split3: bool) -> torch.Tensor:  # [M, K], [N, K] -> [M, N]
    assert x.ndim == 2 and w.ndim == 2 and x.shape[1] == w.shape[1], "x [M, K] and w [N, K]"
    assert x.dtype == w.dtype == torch.float32, "TF32 emulation is defined for float32 inputs"
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    BLOCK_M, BLOCK_N, BLOCK_K = 16, 16, 32
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    linear_kernel[grid](
        x, w, y, M, N, K,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SPLIT3=split3,
    )
    return y


def linear_tf32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # [M, K], [N, K] -> [M, N]
    return _linear(x, w, split3=False)


def linear_tf32x3(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # [M, K], [N, K] -> [M, N]
    return _linear(x, w, split3=True)
