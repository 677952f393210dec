"""Inputs with the value ranges a real decode step sees (the spec's make_inputs).

The declarative Arg draws cannot express a log-decay (g <= 0) or a gate strength in
(0, 1), so they are drawn here; shapes and dtypes match the spec's args.
"""

import torch


def make_inputs(shape: dict, dtype: torch.dtype, gen: torch.Generator) -> list[torch.Tensor]:
    B, H, K, V = shape["B"], shape["H"], shape["K"], shape["V"]

    def normal(*dims):
        return torch.randn(dims, generator=gen, dtype=torch.float64)

    q, k, v = normal(B, H, K), normal(B, H, K), normal(B, H, V)
    g = -0.7 * torch.rand((B, H, K), generator=gen, dtype=torch.float64)  # decay exp(g) in (0.5, 1]
    beta = torch.sigmoid(normal(B, H))  # delta-rule step size in (0, 1)
    state = normal(B, H, K, V)
    norm_weight = 1.0 + 0.1 * normal(V)
    gate = normal(B, H, V)
    act = [q, k, v]
    return [t.to(dtype) for t in act] + [g.float(), beta.float(), state.float(), norm_weight.to(dtype),
                                         gate.to(dtype)]
