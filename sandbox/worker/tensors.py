"""Tensors across the boundary: seeded input generation and safe (de)serialisation.

Inputs are generated from the spec's argument declarations and a seed, so the
reference job and the candidate job see bit-identical inputs without one trusting the
other. Files are written with ``torch.save`` and read with ``weights_only=True``
(no pickled code runs on load).

Layouts survive the boundary: a tensor keeps its shape, strides and storage offset, and
tensors that are views of one storage (q and k sliced from one fused qkv) are saved as
one storage and come back as views of one storage (`save_tensors`, `to_device`,
`clone_shared`), so the candidate sees the layout the spec made.
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
        tensors.append(t.to(device=device, dtype=arg_dtype))
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
    """Each distinct storage once, each tensor a view of it (shape, strides, offset):
    ``torch.save`` keeps views of one storage as views when they are on the CPU."""
    names = list(tensors)
    on_cpu = to_device([tensors[k].detach() for k in names], "cpu")
    torch.save(dict(zip(names, on_cpu)), path)


def to_device(tensors: list[torch.Tensor], device: str) -> list[torch.Tensor]:
    """The same views over storages moved once each (``t.to(device)`` per tensor would
    give each view a contiguous storage of its own)."""
    if all(t.device.type == torch.device(device).type for t in tensors):
        return list(tensors)
    return _rebuild(tensors, lambda s: s.to(device=device))


def clone_shared(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Fresh copies with the same layout: views of one storage stay views of one (new)
    storage; ``t.clone()`` would make a padded or sliced view contiguous."""
    return _rebuild(tensors, lambda s: s.clone())


def copy_shared(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """Copy `src`'s values into `dst`'s buffers (same pointers, new values): storage by
    storage, padding included, when both lists have the same layout; else view by view."""
    dst_storages, dst_layout = _layout(dst)
    src_storages, src_layout = _layout(src)
    if dst_layout == src_layout:
        for a, b in zip(dst_storages, src_storages):
            a.copy_(b)
        return
    for d, s in zip(dst, src):
        d.copy_(s)


def _layout(tensors: list[torch.Tensor]) -> tuple[list, list]:
    """Distinct storages in first-seen order, and each tensor's (shape, strides, offset,
    which storage, its size): two lists with one layout differ only in values."""
    order: dict[tuple, int] = {}
    storages, layout = [], []
    for t in tensors:
        key = _storage_key(t)
        if key not in order:
            order[key] = len(storages)
            storages.append(t.untyped_storage())
        layout.append((tuple(t.shape), t.stride(), t.storage_offset(), order[key], key[2], t.dtype))
    return storages, layout


def _storage_key(t: torch.Tensor) -> tuple:
    s = t.untyped_storage()
    return (s.device.type, s.data_ptr(), s.nbytes())


def _rebuild(tensors: list[torch.Tensor], new_storage) -> list[torch.Tensor]:
    storages: dict[tuple, torch.UntypedStorage] = {}
    out = []
    for t in tensors:
        key = _storage_key(t)
        if key not in storages:
            storages[key] = new_storage(t.untyped_storage())
        storage = storages[key]
        view = torch.empty(0, dtype=t.dtype, device=storage.device)
        view.set_(storage, t.storage_offset(), t.shape, t.stride())
        out.append(view)
    return out


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ValueError(f"{path.name} is not a dict of tensors")
    return data
