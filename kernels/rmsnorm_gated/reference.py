import torch

EPS = 1e-6


def rmsnorm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # x, gate [M, N], weight [N] -> [M, N] in x's dtype: normalise, scale, then gate (norm before gate)
    wide = torch.promote_types(x.dtype, torch.float32)  # FP32 math; float64 when the judge runs it so
    xf, zf, wf = x.to(wide), gate.to(wide), weight.to(wide)
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + EPS) * wf
    return (y * zf * torch.sigmoid(zf)).to(x.dtype)
