"""A user's own kernel of the tests': rowscale, out = 2 * x over the rows of a matrix, in a
workspace of its own. Its reference and `stride_bug` impl (which assumes contiguous rows:
right on a packed matrix, wrong on a strided view) are always there; each test adds the
impls it needs, each in files of its own.

`write_rowscale(workspace, impls, files, shape)` writes kernels/rowscale/ under `workspace`
and returns that folder.
"""

from __future__ import annotations

from pathlib import Path

SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="rowscale",
    description="out = 2 * x over rows of a matrix.",
    reference="reference.py:rowscale",
    impls={impls!r},
    args=(Arg("x", ("M", "N")),),
    shapes={{"cpu": ({shape!r},), "gpu": ({shape!r},)}},
    dtypes=("float32",),
    flops=lambda s: s["M"] * s["N"],
    bytes=lambda s, itemsize: 2 * s["M"] * s["N"] * itemsize,
    tolerances={{"float32": Tolerance(rel_l2=1e-6, why="one rounding")}},
    partition=None,
)
"""
REFERENCE = "def rowscale(x):\n    return 2 * x\n"
STRIDE_BUG = "def rowscale(x):\n    return (2 * x.reshape(-1)).view(x.shape)\n"


def write_rowscale(
    workspace: Path, impls: dict[str, str], files: dict[str, str], shape: dict[str, int]
) -> Path:
    """Write kernels/rowscale/ under `workspace`: the spec (the one shape `shape` on cpu and
    gpu), reference.py, stride_bug.py, and `files` (name -> text) holding `impls`
    (name -> 'file.py:function')."""
    folder = workspace / "kernels" / "rowscale"
    folder.mkdir(parents=True)
    every_impl = {"stride_bug": "stride_bug.py:rowscale", **impls}
    texts = {
        "spec.py": SPEC.format(impls=every_impl, shape=shape),
        "reference.py": REFERENCE,
        "stride_bug.py": STRIDE_BUG,
        **files,
    }
    for name, text in texts.items():
        (folder / name).write_text(text)
    return folder
