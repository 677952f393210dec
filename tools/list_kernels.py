"""list_kernels: what kernels this workspace declares."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .base import Tool, ToolContext, ToolInput, ToolOutput


class Input(ToolInput):
    pass


class KernelSummary(BaseModel):
    name: str = Field(description="Kernel name; pass it as `kernel` to the other tools.")
    description: str = Field(description="What the kernel computes, in one or two sentences.")
    impls: list[str] = Field(
        description="Implementation names (pass as `impl`), besides the reference."
    )
    dtypes: list[str] = Field(description="Dtypes the kernel is checked and timed at.")
    shape_sets: dict[str, list[dict[str, int]]] = Field(
        description="Shape set name ('cpu': small, interpreter-friendly; 'gpu': real sizes) -> its shapes, "
        "each a dict of named sizes such as {'M': 4096, 'N': 4096}."
    )
    has_partition: bool = Field(
        description="True when a tensor-parallel partition spec is declared."
    )


class Output(ToolOutput):
    kernels: list[KernelSummary] = Field(
        description="Every kernel whose spec loaded, sorted by name."
    )
    spec_errors: dict[str, str] = Field(
        default_factory=dict,
        description="Kernel folder -> why its spec.py failed to load (fix these first).",
    )
    spec_search: str = Field(
        default="",
        description="Where kernel specs are looked for (infra-agent.toml's "
        "[kernels] paths), spec.py files nearby that those paths miss, and the paths "
        "setting that would reach them.",
    )


async def run(inp: Input, ctx: ToolContext) -> Output:
    ws = ctx.workspace
    kernels = [
        KernelSummary(
            name=k.spec.name,
            description=k.spec.description,
            impls=sorted(k.spec.impls),
            dtypes=list(k.spec.dtypes),
            shape_sets={
                name: [dict(shape) for shape in shapes] for name, shapes in k.spec.shapes.items()
            },
            has_partition=k.spec.partition is not None,
        )
        for _, k in sorted(ws.kernels.items())
    ]
    search = ws.spec_search()
    summary = f"{len(kernels)} kernels: {', '.join(k.name for k in kernels) or 'none'}"
    if ws.errors:
        summary += f"; {len(ws.errors)} spec(s) failed to load (see spec_errors)"
    if not kernels or "outside them" in search:  # a newcomer's spec that the paths do not reach
        summary += f"; {search}"
    return Output(kernels=kernels, spec_errors=dict(ws.errors), spec_search=search, summary=summary)


TOOL = Tool(
    name="list_kernels",
    title="List kernels",
    description="List the kernels in the workspace: names, descriptions, implementations, dtypes and "
    "shape sets. Start here, then describe_kernel for one kernel's full spec.",
    input_model=Input,
    output_model=Output,
    run=run,
    idempotent=True,
)
