"""The KV-cache quantisers, defined in FP32 arithmetic (what the cache stores): per (token,
head) scale = amax / QMAX, code = round_half_even(x / scale), division correctly rounded.

The check runs these on float64 copies of the inputs; the quantisers cast to FP32 first on
purpose, because the FP32 scale is part of the stored format and the codes are defined
from it. Dequantisation is exact in float64.
"""

import torch

INT8_MAX = 127.0
FP8_E4M3_MAX = 448.0


def _scaled(x: torch.Tensor, qmax: float) -> tuple[torch.Tensor, torch.Tensor]:
    x32 = x.float()
    scale = x32.abs().amax(dim=-1) / qmax  # [T, H] fp32
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero head stores scale 0, codes 0
    return (x32 / safe[..., None]).clamp(-qmax, qmax), scale


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, H, D] float -> (codes int8 [T, H, D], scale float32 [T, H])."""
    y, scale = _scaled(x, INT8_MAX)
    return torch.round(y).to(torch.int8), scale


def dequantize_int8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes int8 [T, H, D], scale [T, H] -> x_hat [T, H, D] (codes * scale)."""
    return codes.to(scale.dtype) * scale[..., None]


def quantize_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, H, D] float -> (codes uint8 [T, H, D]: float8_e4m3fn bit patterns, scale float32 [T, H])."""
    y, scale = _scaled(x, FP8_E4M3_MAX)
    return y.to(torch.float8_e4m3fn).view(torch.uint8), scale


def dequantize_fp8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes uint8 [T, H, D] (float8_e4m3fn bits), scale [T, H] -> x_hat [T, H, D]."""
    return codes.view(torch.float8_e4m3fn).to(scale.dtype) * scale[..., None]
