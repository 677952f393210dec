"""W8A8 GEMM: int8 activations (one scale per token) times int8 weights (one scale per output
channel), accumulated exactly in int32 and dequantised once in the epilogue:

    out[m, n] = (sum_k a[m, k] * w[n, k]) * a_scale[m] * w_scale[n]

`tl.dot(..., out_dtype=tl.int32)` is int8 tensor-core MMA on GPUs and bit-exact under the
Triton interpreter. |acc| <= K * 127^2 stays inside int32 for K < 133,000. The int32 sum
converts to FP32 (exact below 2^24, i.e. K < ~1040 at full-range codes; one rounding
beyond), then two FP32 multiplies and one rounding to the output dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def w8a8_gemm_kernel(
    a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, out_ptr,
    M, N, K,
    stride_am, stride_ak, stride_wn, stride_wk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=mask_m[:, None] & (k[None, :] < K), other=0)  # [BLOCK_M, BLOCK_K] int8
        b = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                    mask=mask_n[None, :] & (k[:, None] < K), other=0)  # [BLOCK_K, BLOCK_N] int8
        acc += tl.dot(a, b, out_dtype=tl.int32)
    a_scale = tl.load(a_scale_ptr + offs_m, mask=mask_m, other=0.0)
    w_scale = tl.load(w_scale_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    out = acc.to(tl.float32) * a_scale[:, None] * w_scale[None, :]
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def w8a8_gemm(a: torch.Tensor, a_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """a int8 [M, K], a_scale float32 [M], w int8 [N, K], w_scale [N] (float32 | bfloat16 | float16)
    -> out [M, N] in w_scale's dtype (the model's dtype, as checkpoints store weight scales)."""
    assert a.dtype == w.dtype == torch.int8 and a.ndim == w.ndim == 2 and a.shape[1] == w.shape[1], \
        "a int8 [M, K] and w int8 [N, K]"
    M, K = a.shape
    N = w.shape[0]
    assert a_scale.shape == (M,) and a_scale.dtype == torch.float32, "a_scale is float32 [M] (one per token)"
    assert w_scale.shape == (N,) and w_scale.is_floating_point(), "w_scale is [N] (one per output channel)"
    out = torch.empty((M, N), device=a.device, dtype=w_scale.dtype)
    BLOCK_M, BLOCK_N, BLOCK_K = 32, 64, 64
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    w8a8_gemm_kernel[grid](
        a, a_scale, w, w_scale, out, M, N, K,
        a.stride(0), a.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )
    return out
