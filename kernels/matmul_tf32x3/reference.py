import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # [M, K], [K, N] -> [M, N]
    return a @ b
