"""Tensors across the boundary: seeded input generation and safe (de)serialisation.

Inputs are generated from the spec's argument declarations and a seed, so the
reference job and the candidate job see bit-identical inputs without one trusting the
other. Files are written with ``torch.save`` and read with ``weights_only=True``
(no pickled code runs on load).
"""

from __future__ import annotations

from pathlib import Path

import torch

DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


def dtype_of(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}") from None


def make_inputs(
    args: list[dict],
    shape: dict[str, int],
    dtype: str,
    seed: int,
    device: str = "cpu",
    distribution: str | None = None,
) -> list[torch.Tensor]:
    """One tensor per declared argument (see kernels/schema.py `Arg`, as a dict).

    `distribution` overrides float arguments' draws: "normal", "uniform", "large"
    (N(0,1) * 1e4), "tiny" (N(0,1) * 1e-4), "constant_row" (normal, first row constant).
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    tensors = []
    for arg in args:
        dims = tuple(d if isinstance(d, int) else shape[d] for d in arg["shape"])
        arg_dtype = dtype_of(arg.get("dtype") or dtype)
        dist = arg.get("distribution", "normal")
        if arg_dtype.is_floating_point:
            if distribution and dist == "normal":
                dist = distribution
            t = _draw_float(dims, dist, gen)
        else:
            t = torch.randint(
                arg.get("low", 0), arg.get("high", 2**16), dims, generator=gen, dtype=torch.int64
            )
        tensors.append(t.to(device=device, dtype=arg_dtype).contiguous())
    return tensors


def _draw_float(dims: tuple[int, ...], dist: str, gen: torch.Generator) -> torch.Tensor:
    if dist == "uniform":
        return torch.rand(dims, generator=gen, dtype=torch.float64) * 2 - 1
    t = torch.randn(dims, generator=gen, dtype=torch.float64)
    if dist == "positive":
        return t.abs() + 0.5
    if dist == "large":
        return t * 1e4
    if dist == "tiny":
        return t * 1e-4
    if dist == "constant_row" and t.ndim >= 1 and t.shape[0] > 0:
        t[0] = 1.5  # a row of constants: zero variance along every other dim
        return t
    if dist in ("normal", "constant_row"):
        return t
    raise ValueError(f"unknown distribution {dist!r}")


def save_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    torch.save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, path)


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ValueError(f"{path.name} is not a dict of tensors")
    return data
