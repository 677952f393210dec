"""describe_kernel: one kernel's full spec, with its cost model evaluated per shape.

The cost model is evaluated here (plain Python on the spec's lambdas), so the agent sees
FLOPs, bytes and arithmetic intensity for every shape and dtype before it measures
anything: the first hint whether a kernel is memory- or compute-bound.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..kernels.schema import ITEMSIZE, KernelSpec
from ..kernels.workspace import Kernel
from .base import AgentError, Tool, ToolContext, ToolInput, ToolOutput
from .common.tolerance import DTYPE_TOLERANCES, resolve_tolerance


class Input(ToolInput):
    kernel: str = Field(description="Kernel name, as listed by list_kernels (e.g. 'rmsnorm').")
    include_source: bool = Field(
        default=True, description="Include the reference and implementation source code as text."
    )


class ArgInfo(BaseModel):
    name: str = Field(description="Positional argument name of the entry function.")
    shape: list[str | int] = Field(
        description="Dimension names (sizes come from each shape) or fixed ints."
    )
    dtype: str | None = Field(description="Pinned dtype, or null when it takes the case dtype.")
    distribution: str = Field(
        description="How test values are drawn: normal, uniform, positive, int."
    )


class CostAtDtype(BaseModel):
    dtype: str = Field(description="Element dtype.")
    bytes: float = Field(
        description="Bytes moved by one call at this dtype (cost model), in bytes."
    )
    arithmetic_intensity: float = Field(description="FLOPs per byte moved (FLOP/byte).")


class ShapeCost(BaseModel):
    shape_set: str = Field(description="Which set this shape belongs to ('cpu' or 'gpu').")
    shape: dict[str, int] = Field(description="Named sizes, e.g. {'M': 4096, 'N': 4096}.")
    flops: float = Field(
        description="Floating-point operations of one call (cost model), in FLOPs."
    )
    per_dtype: list[CostAtDtype] = Field(
        description="Bytes and arithmetic intensity at each declared dtype."
    )


class ToleranceInfo(BaseModel):
    dtype: str = Field(description="Dtype this tolerance applies to.")
    rel_l2: float = Field(
        description="Largest relative L2 error accepted (||y - ref|| / ||ref||), unitless."
    )
    max_abs: float | None = Field(
        description="Largest absolute elementwise error accepted, if set."
    )
    why: str = Field(
        description="Why the tolerance is this size (error analysis of the reference)."
    )
    source: str = Field(
        default="spec",
        description="'spec' (the spec sets it) or 'dtype default' (the spec sets none for this "
        "dtype: check_numerics applies the default table's, as shown).",
    )


class PartitionInfo(BaseModel):
    args: dict[str, int] = Field(
        description="Argument name -> dimension it is split along across ranks."
    )
    num_parts: int = Field(description="Number of simulated tensor-parallel ranks.")
    combine: str = Field(description="'concat' along out_dim, or 'sum' (all-reduce in rank order).")
    out_dim: int = Field(description="Output dimension for 'concat'.")


class Output(ToolOutput):
    name: str = Field(description="Kernel name.")
    description: str = Field(description="What the kernel computes.")
    folder: str = Field(description="Kernel folder in the workspace (absolute path).")
    reference: str = Field(description="Reference entry, 'file.py:function' (a torch function).")
    impls: dict[str, str] = Field(description="Implementation name -> 'file.py:function'.")
    args: list[ArgInfo] = Field(description="Entry function arguments in order.")
    dtypes: list[str] = Field(description="Dtypes the kernel is checked and timed at.")
    shapes: list[ShapeCost] = Field(
        description="Every shape of every set, with its cost model evaluated."
    )
    tolerances: list[ToleranceInfo] = Field(
        description="Numerics acceptance per dtype: every listed dtype (the spec's own, else "
        "the default check_numerics applies), then any other dtype the spec sets one for."
    )
    partition: PartitionInfo | None = Field(
        description="Tensor-parallel split, or null if none is declared."
    )
    forbidden_ops: list[str] = Field(
        description="aten ops an implementation may not call (op audit)."
    )
    custom_inputs: str | None = Field(
        description="'file.py:fn' generating inputs, when args cannot express them."
    )
    sources: dict[str, str] = Field(
        default_factory=dict,
        description="'reference' and each impl name -> the source file's text.",
    )


def cost_rows(spec: KernelSpec) -> list[ShapeCost]:
    rows = []
    for set_name, shapes in spec.shapes.items():
        for shape in shapes:
            flops = float(spec.flops(shape))
            per_dtype = []
            for dtype in spec.dtypes:
                nbytes = float(spec.bytes(shape, ITEMSIZE.get(dtype, 4)))
                per_dtype.append(
                    CostAtDtype(
                        dtype=dtype,
                        bytes=nbytes,
                        arithmetic_intensity=flops / nbytes if nbytes else 0.0,
                    )
                )
            rows.append(
                ShapeCost(shape_set=set_name, shape=dict(shape), flops=flops, per_dtype=per_dtype)
            )
    return rows


def tolerance_rows(spec: KernelSpec) -> list[ToleranceInfo]:
    """The tolerance check_numerics applies at each listed dtype (resolve_tolerance: the spec's,
    else the dtype default), then the spec's for dtypes it does not list."""
    dtypes = [d for d in spec.dtypes if d in spec.tolerances or d in DTYPE_TOLERANCES]
    rows = []
    for d in dict.fromkeys([*dtypes, *spec.tolerances]):
        t = resolve_tolerance(d, spec.tolerances, None)
        rows.append(
            ToleranceInfo(dtype=d, rel_l2=t.rel_l2, max_abs=t.max_abs, why=t.why, source=t.source)
        )
    return rows


def sources_of(kernel: Kernel) -> dict[str, str]:
    spec = kernel.spec
    out = {}
    for label, ref in {"reference": spec.reference, **spec.impls}.items():
        try:
            out[label] = kernel.source_of(ref).read_text()
        except OSError as exc:
            out[label] = f"<unreadable: {exc}>"
    return out


async def run(inp: Input, ctx: ToolContext) -> Output:
    try:
        kernel = ctx.workspace.kernel(inp.kernel)
    except Exception as exc:
        raise AgentError(str(exc)) from None
    spec = kernel.spec
    p = spec.partition
    shapes = cost_rows(spec)
    return Output(
        name=spec.name,
        description=spec.description,
        folder=str(kernel.folder),
        reference=spec.reference,
        impls=dict(spec.impls),
        args=[
            ArgInfo(name=a.name, shape=list(a.shape), dtype=a.dtype, distribution=a.distribution)
            for a in spec.args
        ],
        dtypes=list(spec.dtypes),
        shapes=shapes,
        tolerances=tolerance_rows(spec),
        partition=PartitionInfo(
            args=dict(p.args), num_parts=p.num_parts, combine=p.combine, out_dim=p.out_dim
        )
        if p
        else None,
        forbidden_ops=list(spec.forbidden_ops),
        custom_inputs=spec.make_inputs,
        sources=sources_of(kernel) if inp.include_source else {},
        summary=f"{spec.name}: {len(spec.args)} args, {len(shapes)} shapes in {len(spec.shapes)} sets, "
        f"dtypes {', '.join(spec.dtypes)}, impls {', '.join(spec.impls) or 'none'}",
    )


TOOL = Tool(
    name="describe_kernel",
    title="Describe a kernel",
    description="One kernel's full spec: arguments, shapes per set, dtypes, the cost model evaluated on "
    "each shape (FLOPs, bytes per dtype, arithmetic intensity), tolerances and why, the tensor-parallel "
    "partition, forbidden ops, and the reference and implementation source.",
    input_model=Input,
    output_model=Output,
    run=run,
    idempotent=True,
    kernel_field="kernel",
)
