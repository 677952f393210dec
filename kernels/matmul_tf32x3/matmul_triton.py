"""c = a @ b in float32 storage, three ways: IEEE FP32, TF32, and 3xTF32.

TF32 keeps 10 of float32's 23 mantissa bits; tensor cores read TF32 operands and
accumulate in FP32. The Triton interpreter does not emulate that (it computes
`input_precision="tf32"` in full FP32, FACTS.md), so the operands are truncated here with
a bit mask, always: on a GPU the TF32 dot then sees operands that are already TF32 (no
further loss) and still runs on tensor cores; on CPU the same code gives TF32's error.
The mask truncates like tp_linear's (the two case studies agree).

3xTF32 splits each operand into hi = tf32(v) and lo = tf32(v - hi) and sums
lo*hi + hi*lo + hi*hi (small terms first): only lo*lo (~2^-22) and lo's own truncation
are lost, FP32 accuracy at three tensor-core products per block.

`DOT_PRECISION` is the input precision of the TF32 dots: "tf32" (tensor cores on sm_80+
and gfx942). Targets without a TF32 dot (gfx950) compile with
constexprs={"DOT_PRECISION": "ieee"}, which gives the same numbers on CUDA cores.
"""

import torch
import triton
import triton.language as tl

IEEE, TF32, TF32X3 = 0, 1, 2


@triton.jit
def _tf32(v):
    # keep sign, exponent and the top 10 mantissa bits: 0xFFFFE000 as int32
    return (v.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    MODE: tl.constexpr,  # IEEE, TF32 or TF32X3
    DOT_PRECISION: tl.constexpr = "tf32",
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)  # [BLOCK_M, BLOCK_K]
        b = tl.load(b_ptr + k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)  # [BLOCK_K, BLOCK_N]
        if MODE == 0:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            a_hi = _tf32(a)
            b_hi = _tf32(b)
            if MODE == 2:
                acc += tl.dot(_tf32(a - a_hi), b_hi, input_precision=DOT_PRECISION)
                acc += tl.dot(a_hi, _tf32(b - b_hi), input_precision=DOT_PRECISION)
            acc += tl.dot(a_hi, b_hi, input_precision=DOT_PRECISION)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _matmul(a: torch.Tensor, b: torch.Tensor, mode: int) -> torch.Tensor:  # [M, K], [K, N] -> [M, N]
    assert a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0], "a [M, K] and b [K, N]"
    assert a.dtype == b.dtype == torch.float32, "an fp32 matmul: float32 inputs"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, MODE=mode, num_warps=4,
    )
    return c


def matmul_ieee(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # [M, K], [K, N] -> [M, N]
    return _matmul(a, b, IEEE)


def matmul_tf32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # [M, K], [K, N] -> [M, N]
    return _matmul(a, b, TF32)


def matmul_tf32x3(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # [M, K], [K, N] -> [M, N]
    return _matmul(a, b, TF32X3)
