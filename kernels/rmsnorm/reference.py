import torch

EPS = 1e-6  # the one eps: the Triton impl imports it from here


def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:  # [M, N], [N] -> [M, N]
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return x * rstd * weight
