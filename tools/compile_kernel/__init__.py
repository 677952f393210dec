"""compile_kernel: does it compile for target T, and at what cost in registers,
shared memory, spills, occupancy and instructions. No GPU needed.

plan (pure: the code, the target, how to get the signature; the job and its cache key)
-> jobs (Triton AOT or nvcc plus cuobjdump/nvdisasm in a sandbox worker, or the
per-workspace cache's earlier answer) -> judge (parse the compiler's own reports into
numbers) -> report (diff against a baseline, notes, one summary line).
"""

from __future__ import annotations

from ..base import AgentError, Tool, ToolContext
from ..common.expect import WithEvidence
from ..common.launch_config import parse_applied
from . import jobs, plan
from .expect_fields import EXPECT
from .judge import judge
from .occupancy import Target
from .report import describe, describe_changes, diff, emitted_arch, notes
from .schema import Input, KernelResources, Output


async def run(inp: Input, ctx: ToolContext) -> WithEvidence:
    target = plan.resolve_target(inp.target)
    request = plan.plan_job(inp, ctx, target)
    raw, out_dir, cached = await jobs.compile(ctx, request, inp.timeout_s)
    kernels = judge(raw, out_dir, target, inp)
    for name in raw.get("files", []):
        ctx.artifact(name, out_dir / name)
    arch = emitted_arch(raw, target.name)
    out = Output(
        target=target.name,
        arch=arch,
        backend=target.backend,
        language=request["language"],
        kernels=kernels,
        cached=cached,
        compile_s=round(raw.get("compile_s", 0.0), 3),
        launch_config_applied=parse_applied(raw.get("launch_config_applied")),
    )
    out.notes = notes(raw, out_dir, kernels)
    summary = describe(arch, kernels[0], request["what"])
    base: KernelResources | None = None  # what expect's baseline.<field> reads
    if inp.baseline is not None:
        base_kernels, out.baseline = await _baseline(inp, ctx, target)
        base = next((b for b in base_kernels if b.name == kernels[0].name), base_kernels[0])
        out.diff = diff(base, kernels[0])
        summary += f"; vs {out.baseline}: {describe_changes(out.diff, kernels[0])}"
    if cached:
        summary += " (cached)"
    out.summary = summary
    return WithEvidence(out, base)


async def _baseline(
    inp: Input, ctx: ToolContext, target: Target
) -> tuple[list[KernelResources], str]:
    assert inp.baseline is not None  # run() asks for a baseline only when one is named
    row = ctx.experiment(inp.baseline)
    if row is not None:
        if row.get("tool") != "compile_kernel" or not (row.get("result") or {}).get("kernels"):
            raise AgentError(
                f"experiment {inp.baseline} is not a successful compile_kernel call; give the id "
                "of one, or baseline source code"
            )
        result = row["result"]
        return [
            KernelResources(**k) for k in result["kernels"]
        ], f"{inp.baseline} ({result.get('target')})"
    if "\n" not in inp.baseline and "def " not in inp.baseline and "__global__" not in inp.baseline:
        raise AgentError(
            f"baseline {inp.baseline!r} is neither an experiment id in the ledger nor source code"
        )
    base_inp = inp.model_copy(update={"source": inp.baseline, "path": None, "baseline": None})
    try:
        request = plan.plan_job(base_inp, ctx, target)
        raw, out_dir, _ = await jobs.compile(ctx, request, inp.timeout_s)
    except AgentError as exc:
        raise AgentError(f"the baseline source failed (the candidate compiled): {exc}") from None
    for name in raw.get("files", []):
        if name.endswith((".sass", ".amdgcn", ".ptx")):
            ctx.artifact(f"baseline-{name}", out_dir / name)
    return judge(raw, out_dir, target, base_inp), "baseline source"


TOOL = Tool(
    name="compile_kernel",
    title="Compile a kernel for a GPU target",
    description="Compile a Triton or CUDA C++ kernel ahead of time for an NVIDIA (sm_80..sm_120) or AMD (gfx942, "
    "gfx950) target, without a GPU, and report what the compiler says: errors at your source line, registers "
    "per thread, shared memory, spills, theoretical occupancy and its limiting factor, the SASS/AMDGCN "
    "instruction mix (tensor-core MMA, vector widths, LDL/STL; static: a loop body counts once), the SASS "
    "loops with their trip counts and the executed estimate per output element, and the IR as artifacts. "
    "With baseline= it lists what moved. The cheapest check of a register, tiling or vectorisation hypothesis.",
    input_model=Input,
    output_model=Output,
    run=run,
    kernel_field="kernel",
    expect=EXPECT,
    idempotent=True,
)
