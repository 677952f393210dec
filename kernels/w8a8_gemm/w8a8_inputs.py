"""Inputs with the magnitudes of a real W8A8 layer: int8 codes over the full range and scales
of amax / 127 (about 1e-2), so outputs stay O(sqrt(K)) and fit float16 (N(0, 1) scales would
overflow it at K = 256)."""


def make_inputs(shape: dict, dtype, generator) -> list:
    """[a int8 [M, K], a_scale float32 [M], w int8 [N, K], w_scale `dtype` [N]] for one trial."""
    import torch

    M, N, K = shape["M"], shape["N"], shape["K"]
    a = torch.randint(-127, 128, (M, K), generator=generator, dtype=torch.int64).to(torch.int8)
    w = torch.randint(-127, 128, (N, K), generator=generator, dtype=torch.int64).to(torch.int8)
    a_scale = ((torch.randn(M, generator=generator, dtype=torch.float64).abs() + 0.5) / 127).to(torch.float32)
    w_scale = ((torch.randn(N, generator=generator, dtype=torch.float64).abs() + 0.5) / 127).to(dtype)
    return [a, a_scale, w, w_scale]
