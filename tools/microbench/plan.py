"""microbench, step 1: the plan (pure): what code to time, on which shapes and inputs,
and the payloads of its jobs. Nothing here runs a job."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...kernels.coderef import REFERENCE, CodeRef, impl_code, resolve_code, spec_code
from ...kernels.schema import ITEMSIZE, KernelSpec
from ...kernels.workspace import Kernel, WorkspaceError
from ...sandbox.worker.protocol import MicrobenchPayload, ReferencePayload, input_set_key
from ...sandbox.worker.shared import meminfo_bytes
from ..base import AgentError, ToolContext, as_agent_error
from ..common.cases import MAX_MICROBENCH_SHAPES, check_case_count, distinct
from ..common.recorded_code import recorded_code
from ..common.seeds import trial_seed
from .schema import MIN_TIMED_CALLS, Input

if TYPE_CHECKING:
    from .jobs import SpotCall

NUM_INPUT_SETS = 16  # at most; the worker uses as many as it takes to overflow the cache
NUM_SPOT_CHECKS = 3  # timed calls per arm whose outputs are checked


@dataclass(frozen=True)
class Code:
    name: str  # "candidate" or "baseline": the arm, as the worker names it
    label: str  # what ran, for people
    entry: str
    source: str | None = None
    path: str | None = None  # as the sandbox sees it
    is_reference: bool = False  # the spec's reference: nothing to spot-check
    snapshot: Path | None = (
        None  # a recorded experiment's code, copied into the job (path is relative to it)
    )
    launch_config: dict | None = None  # sandbox/worker/launch_config.py

    def payload(self) -> dict:
        return {
            "name": self.name,
            "entry": self.entry,
            "source": self.source,
            "path": self.path,
            "launch_config": self.launch_config,
        }

    def configured(self, config: dict | None) -> Code:
        """This arm under `config` (none: as it is); the label says the config."""
        if not config:
            return self
        label = f"{self.label} {config}"
        return dataclasses.replace(self, label=label, launch_config=dict(config))


@dataclass(frozen=True)
class Bench:
    """What one call times, shared by all its shapes."""

    kernel: Kernel
    inp: Input
    dtype: str
    shapes: tuple[dict[str, int], ...]
    arms: tuple[Code, ...]  # the candidate, then the baseline if any

    @property
    def spec(self) -> KernelSpec:
        return self.kernel.spec


def make_bench(ctx: ToolContext, inp: Input) -> Bench:
    """Resolve and check everything a timing job needs before any job runs."""
    kernel = kernel_of(ctx, inp.kernel)
    device = ctx.sandbox.device
    if inp.cuda_graph and device != "cuda":
        raise AgentError(
            "cuda_graph=true needs a CUDA device; jobs here run on the CPU. Drop cuda_graph"
        )
    dtype = dtype_of(kernel.spec, inp.dtype)
    shapes = shapes_of(kernel.spec, inp.shapes, device)
    for shape in shapes:
        check_memory(kernel.spec, shape, dtype, ctx.sandbox.limits.memory_bytes)
    candidate = candidate_code(ctx, kernel, inp).configured(inp.launch_config)  # its errors first
    baseline = baseline_code(ctx, kernel, inp)
    if baseline is None and inp.baseline_launch_config:
        raise AgentError("baseline_launch_config needs a baseline (baseline= or baseline_source=)")
    arms = (candidate,) + ((baseline,) if baseline is not None else ())
    return Bench(kernel=kernel, inp=inp, dtype=dtype, shapes=tuple(shapes), arms=arms)


def kernel_of(ctx: ToolContext, name: str) -> Kernel:
    try:
        return ctx.workspace.kernel(name)
    except WorkspaceError as exc:
        raise AgentError(str(exc)) from None


def dtype_of(spec: KernelSpec, dtype: str | None) -> str:
    if dtype is None:
        return spec.dtypes[0]
    if dtype not in spec.dtypes:
        raise AgentError(
            f"dtype {dtype!r} is not one of {spec.name}'s dtypes {list(spec.dtypes)}; pick one of those"
        )
    return dtype


def shapes_of(spec: KernelSpec, shapes: list[dict] | None, device: str) -> list[dict]:
    if not shapes:
        return [dict(s) for s in spec.shapes.get(device) or next(iter(spec.shapes.values()))]
    names = sorted({d for a in spec.args for d in a.shape if isinstance(d, str)})
    for shape in shapes:
        missing = [n for n in names if n not in shape]
        bad = {k: v for k, v in shape.items() if not isinstance(v, int) or v <= 0}
        if missing or bad:
            raise AgentError(
                f"shape {shape} must give positive integer sizes for {names} "
                f"(missing {missing}, not positive {bad}); e.g. {dict(spec.shapes['cpu'][0])}"
            )
    unique = distinct([dict(s) for s in shapes])
    check_case_count(len(unique), MAX_MICROBENCH_SHAPES, "shapes")
    return unique


def check_memory(spec: KernelSpec, shape: dict, dtype: str, job_memory_bytes: int | None) -> None:
    """Refuse, with the numbers, shapes whose inputs cannot fit in host memory.

    Inputs are drawn in float64 on the host before the cast, the timing job keeps two
    or more input sets plus outputs, and the spot-check's reference runs in float64:
    about four sets at the case dtype plus two float64 copies. The worker checks the
    GPU's own free memory before it allocates there.
    """
    numels = [math.prod(a.dims(shape)) for a in spec.args]
    set_bytes = sum(n * ITEMSIZE[a.dtype or dtype] for n, a in zip(numels, spec.args))
    need = 4 * set_bytes + 2 * 8 * sum(numels)
    limits = [b for b in (meminfo_bytes("MemAvailable"), job_memory_bytes) if b]
    available = min(limits) if limits else None
    if available is not None and need > 0.8 * available:
        raise AgentError(
            f"shape {shape} ({dtype}) needs about {need / 2**30:.2f} GiB of host memory (one input set is "
            f"{set_bytes / 2**30:.2f} GiB; sets are rotated and drawn in float64), but only "
            f"{available / 2**30:.2f} GiB is available to a job (host free memory, sandbox limit): "
            "use smaller shapes"
        )


def candidate_code(ctx: ToolContext, kernel: Kernel, inp) -> Code:
    return _arm(
        ctx, "candidate", _resolve(ctx, kernel, inp.impl, inp.source, inp.path, inp.entry, "entry")
    )


def baseline_code(ctx: ToolContext, kernel: Kernel, inp) -> Code | None:
    if inp.baseline_source is not None or inp.baseline_path is not None:
        if inp.baseline is not None:
            raise AgentError(
                "give baseline (an impl or experiment id) or baseline_source/baseline_path, not both"
            )
        return _arm(
            ctx,
            "baseline",
            _resolve(
                ctx,
                kernel,
                None,
                inp.baseline_source,
                inp.baseline_path,
                inp.baseline_entry or inp.entry,
                "baseline_entry",
            ),
        ).configured(inp.baseline_launch_config)
    if inp.baseline is None:
        return None
    if inp.baseline == REFERENCE or inp.baseline in kernel.spec.impls:
        code = _resolve(ctx, kernel, inp.baseline, None, None, None, "entry")
        return _arm(ctx, "baseline", code).configured(inp.baseline_launch_config)
    record = ctx.experiment(inp.baseline)
    if record is None:
        raise AgentError(
            f"baseline {inp.baseline!r} is neither an implementation of {kernel.spec.name} "
            f"({', '.join([REFERENCE, *kernel.spec.impls])}) nor an experiment id "
            "(list_experiments shows them)"
        )
    args = record.get("arguments") or {}
    if (args.get("kernel") or record.get("kernel")) != kernel.spec.name:
        raise AgentError(
            f"experiment {inp.baseline} timed kernel {args.get('kernel')!r}, not "
            f"{kernel.spec.name!r}: a baseline must compute the same function"
        )
    # the code that experiment ran, from its snapshot: never today's (possibly edited) file
    ran = recorded_code(
        ctx, record, kernel, f"microbench kernel={kernel.spec.name} with its impl=/path=/source="
    )
    # and the config it ran under, unless baseline_launch_config says otherwise
    recorded = args.get("launch_config") if isinstance(args.get("launch_config"), dict) else None
    if inp.baseline_launch_config:
        config, how = dict(inp.baseline_launch_config), "baseline_launch_config"
    else:
        config, how = recorded, "its recorded launch_config"
    return Code(
        name="baseline",
        label=f"experiment {inp.baseline} ({ran.label}, its recorded code"
        + (f"; {how} {config})" if config else ")"),
        entry=ran.code.entry,
        source=ran.code.source,
        path=ran.job_path,
        is_reference=ran.code.is_reference,
        snapshot=ran.folder,
        launch_config=config,
    )


def _resolve(
    ctx: ToolContext,
    kernel: Kernel,
    impl: str | None,
    source: str | None,
    path: str | None,
    entry: str | None,
    entry_field: str,
) -> CodeRef:
    with as_agent_error(WorkspaceError):
        return resolve_code(
            ctx.workspace,
            kernel=kernel,
            impl=impl,
            source=source,
            path=path,
            entry=entry,
            entry_field=entry_field,
            allow_reference=True,
        )


def _arm(ctx: ToolContext, name: str, code: CodeRef) -> Code:
    """The arm `name` runs `code`; its label says what that is (impl, 'source', or the file)."""
    if code.impl is not None:
        label = code.impl
    elif code.source is not None:
        label = "source"
    else:
        label = str(code.path.relative_to(ctx.workspace.root.resolve()))
    where = code.payload(ctx.sandbox.workspace_path)
    return Code(
        name=name,
        label=label,
        entry=code.entry,
        source=where.get("source"),
        path=where.get("path"),
        is_reference=code.is_reference,
    )


def _args_payload(spec: KernelSpec) -> list[dict]:
    return [{**dataclasses.asdict(a), "shape": list(a.shape)} for a in spec.args]


def _make_inputs_payload(ctx: ToolContext, kernel: Kernel) -> dict | None:
    if not kernel.spec.make_inputs:
        return None
    return spec_code(kernel, kernel.spec.make_inputs).payload(ctx.sandbox.workspace_path)


def timing_payload(
    ctx: ToolContext, kernel: Kernel, arms: Sequence[Code], shape: dict, dtype: str, index: int, inp
) -> MicrobenchPayload:
    """The `microbench` op's payload for one shape; `input_seeds` also seed the spot-check's reference."""
    state = ctx.workspace.state_dir
    return {
        "arms": [a.payload() for a in arms],
        "args": _args_payload(kernel.spec),
        "shape": shape,
        "dtype": dtype,
        "make_inputs": _make_inputs_payload(ctx, kernel),
        "input_seeds": [
            trial_seed(state, ctx.experiment_id, index, t) for t in range(NUM_INPUT_SETS)
        ],
        "budget_ms": inp.budget_ms,
        "target_rel_se": inp.target_rel_se_pct / 100,
        "decide_margin": None if inp.decide_margin_pct is None else inp.decide_margin_pct / 100,
        "min_timed_calls": MIN_TIMED_CALLS,
        "max_budget_ms": inp.max_budget_ms(),
        "num_spot_checks": NUM_SPOT_CHECKS,
        "order_seed": trial_seed(state, ctx.experiment_id, index, NUM_INPUT_SETS),
        "cuda_graph": inp.cuda_graph,
    }


def spot_check_calls(
    calls: Sequence[SpotCall], arms: Sequence[Code]
) -> tuple[list[SpotCall], list[int]]:
    """The timed calls whose saved outputs are checked (arms that are not the reference),
    and the input sets they used."""
    wanted = [
        c
        for c in calls
        if any(c.arm == a.name and not a.is_reference for a in arms)
        and 0 <= c.input_set < NUM_INPUT_SETS
    ]
    return wanted, sorted({c.input_set for c in wanted})


def spot_reference_payload(
    ctx: ToolContext, kernel: Kernel, shape: dict, dtype: str, sets: list[int], seeds: Sequence[int]
) -> ReferencePayload:
    """The `reference` op's payload: the spec's reference on the input sets the checked calls used."""
    spec = kernel.spec
    reference = impl_code(kernel, REFERENCE, allow_reference=True)
    return {
        "reference": reference.payload(ctx.sandbox.workspace_path),
        "args": _args_payload(spec),
        "make_inputs": _make_inputs_payload(ctx, kernel),
        "float64": True,
        "items": [
            {"key": input_set_key(s), "shape": shape, "dtype": dtype, "seed": seeds[s]}
            for s in sets
        ],
    }
