"""KV-cache quantisation for a serving engine's cache writes and reads: int8 and fp8 e4m3
codes with one FP32 scale per (token, head), so a head vector's outliers only coarsen its
own codes.

    quantize_int8(x [T, H, D]) -> codes int8 [T, H, D], scale fp32 [T, H]     (scale = amax / 127)
    quantize_fp8(x [T, H, D])  -> codes uint8 [T, H, D], scale fp32 [T, H]    (scale = amax / 448)
    dequantize_int8 / dequantize_fp8(codes, scale) -> x_hat fp32 [T, H, D]

fp8 codes are float8_e4m3fn bit patterns in uint8 storage (as vLLM stores an fp8 cache);
`codes.view(torch.float8_e4m3fn)` reads them in torch.

Everything is FP32 integer-exact arithmetic, so the interpreter, NVIDIA and AMD give the
same bits: `div_rn` (a plain `/` is an approximate division on NVIDIA), round-half-even by
the 1.5 * 2^23 trick, and the fp8 rounding and encoding done on the FP32 bit pattern. The
Triton interpreter's own `.to(tl.float8e4nv)` rounds wrongly when a value rounds up
across a power of two (1.9592 -> 1.0 instead of 2.0; FACTS.md), so it is not used.
"""

import torch
import triton
import triton.language as tl

INT8_MAX = tl.constexpr(127.0)
FP8_E4M3_MAX = tl.constexpr(448.0)
ROUND_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2^23: (t + M) - M rounds |t| < 2^22 to an integer, ties to even
FP8_SUBNORMAL_MAGIC = tl.constexpr(16384.0)  # 2^14, whose FP32 ulp is 2^-9: the e4m3 subnormal step
FP8_MIN_NORMAL_BITS = tl.constexpr(0x3C800000)  # FP32 bits of 2^-6, e4m3's smallest normal
ROWS = 16  # (token, head) rows per program


@triton.jit
def _load_rows(x_ptr, stride_t, stride_h, num_rows, H, D, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (rows < num_rows)[:, None] & (offs_d < D)[None, :]
    ptrs = x_ptr + (rows // H)[:, None].to(tl.int64) * stride_t + (rows % H)[:, None] * stride_h + offs_d[None, :]
    x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)  # [ROWS, BLOCK_D]
    return x, rows, offs_d, mask


@triton.jit
def _scale_rows(x, ROWS: tl.constexpr, QMAX: tl.constexpr):
    """(x / scale clamped to +-QMAX, scale) with scale = amax / QMAX per row; 0 for an all-zero row."""
    scale = tl.math.div_rn(tl.max(tl.abs(x), axis=1), tl.full((ROWS,), QMAX, tl.float32))
    safe = tl.where(scale > 0, scale, 1.0)
    y = tl.math.div_rn(x, tl.broadcast_to(safe[:, None], x.shape))
    return tl.clamp(y, -QMAX, QMAX), scale


@triton.jit
def _e4m3_bits(y):
    """float8_e4m3fn bit pattern (int32, 0..255) of FP32 y with |y| <= 448, rounded to nearest even."""
    bits = y.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = bits & 0x7FFFFFFF
    # normal range: drop 20 of 23 mantissa bits, ties to even; a carry moves into the exponent
    r = (a + 0x7FFFF + ((a >> 20) & 1)) & -1048576  # -1048576 == 0xFFF00000
    normal = (((r >> 23) - 120) << 3) | ((r >> 20) & 7)  # rebias 127 -> 7
    # subnormal range (|y| < 2^-6): multiples of 2^-9; a code of 8 is the smallest normal
    sub = ((a.to(tl.float32, bitcast=True) + FP8_SUBNORMAL_MAGIC) - FP8_SUBNORMAL_MAGIC) * 512.0
    return tl.where(a >= FP8_MIN_NORMAL_BITS, normal, sub.to(tl.int32)) | sign


@triton.jit
def quantize_kernel(x_ptr, codes_ptr, scale_ptr, stride_t, stride_h, num_rows, H, D,
                    ROWS: tl.constexpr, BLOCK_D: tl.constexpr, FP8: tl.constexpr):
    x, rows, offs_d, mask = _load_rows(x_ptr, stride_t, stride_h, num_rows, H, D, ROWS, BLOCK_D)
    if FP8:
        y, scale = _scale_rows(x, ROWS, FP8_E4M3_MAX)
        codes = _e4m3_bits(y).to(tl.uint8)
    else:
        y, scale = _scale_rows(x, ROWS, INT8_MAX)
        codes = ((y + ROUND_MAGIC) - ROUND_MAGIC).to(tl.int8)
    tl.store(codes_ptr + rows[:, None].to(tl.int64) * D + offs_d[None, :], codes, mask=mask)
    tl.store(scale_ptr + rows, scale, mask=rows < num_rows)


@triton.jit
def _e4m3_value(c):
    """FP32 value of float8_e4m3fn bit patterns c (int32, 0..255); NaN for 0x7F and 0xFF."""
    sign = (c & 0x80) << 24
    exp = (c >> 3) & 15
    man = c & 7
    normal = (sign | ((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
    sub = man.to(tl.float32) * 0.001953125  # 2^-9
    sub = tl.where(sign != 0, -sub, sub)
    value = tl.where(exp == 0, sub, normal)
    return tl.where((exp == 15) & (man == 7), float("nan"), value)


@triton.jit
def dequantize_kernel(codes_ptr, scale_ptr, out_ptr, stride_t, stride_h, num_rows, H, D,
                      ROWS: tl.constexpr, BLOCK_D: tl.constexpr, FP8: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (rows < num_rows)[:, None] & (offs_d < D)[None, :]
    ptrs = codes_ptr + (rows // H)[:, None].to(tl.int64) * stride_t + (rows % H)[:, None] * stride_h + offs_d[None, :]
    c = tl.load(ptrs, mask=mask, other=0)
    values = _e4m3_value(c.to(tl.int32)) if FP8 else c.to(tl.float32)
    scale = tl.load(scale_ptr + rows, mask=rows < num_rows, other=0.0)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * D + offs_d[None, :], values * scale[:, None], mask=mask)


def _quantize(x: torch.Tensor, fp8: bool) -> tuple[torch.Tensor, torch.Tensor]:
    assert x.ndim == 3 and x.stride(2) == 1, "x is [T, H, D] with a contiguous last dimension"
    assert x.dtype in (torch.float32, torch.bfloat16, torch.float16), "x is float32, bfloat16 or float16"
    T, H, D = x.shape
    codes = torch.empty((T, H, D), device=x.device, dtype=torch.uint8 if fp8 else torch.int8)
    scale = torch.empty((T, H), device=x.device, dtype=torch.float32)
    quantize_kernel[(triton.cdiv(T * H, ROWS),)](x, codes, scale, x.stride(0), x.stride(1), T * H, H, D,
                                                 ROWS=ROWS, BLOCK_D=triton.next_power_of_2(D), FP8=fp8)
    return codes, scale


def _dequantize(codes: torch.Tensor, scale: torch.Tensor, fp8: bool) -> torch.Tensor:
    assert codes.ndim == 3 and codes.stride(2) == 1, "codes is [T, H, D] with a contiguous last dimension"
    assert codes.dtype == (torch.uint8 if fp8 else torch.int8), "int8 codes, or uint8 float8_e4m3fn bits"
    T, H, D = codes.shape
    assert scale.shape == (T, H) and scale.dtype == torch.float32 and scale.is_contiguous(), "scale float32 [T, H]"
    out = torch.empty((T, H, D), device=codes.device, dtype=torch.float32)
    dequantize_kernel[(triton.cdiv(T * H, ROWS),)](codes, scale, out, codes.stride(0), codes.stride(1), T * H, H, D,
                                                   ROWS=ROWS, BLOCK_D=triton.next_power_of_2(D), FP8=fp8)
    return out


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, H, D] -> (codes int8 [T, H, D], scale float32 [T, H])."""
    return _quantize(x, fp8=False)


def quantize_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, H, D] -> (codes uint8 [T, H, D] holding float8_e4m3fn bits, scale float32 [T, H])."""
    return _quantize(x, fp8=True)


def dequantize_int8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes int8 [T, H, D], scale float32 [T, H] -> x_hat float32 [T, H, D]."""
    return _dequantize(codes, scale, fp8=False)


def dequantize_fp8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes uint8 [T, H, D] (float8_e4m3fn bits), scale float32 [T, H] -> x_hat float32 [T, H, D]."""
    return _dequantize(codes, scale, fp8=True)
