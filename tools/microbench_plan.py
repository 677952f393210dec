"""The microbench plan: what code to time, on which inputs, in which jobs; and the
spot-check of timed outputs against the reference. Side effects go through
ctx.sandbox only; nothing here trusts what a job returned without checking its form."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from ..kernels.schema import ITEMSIZE, KernelSpec
from ..kernels.workspace import Kernel, WorkspaceError
from ..sandbox.job import Job, JobResult
from .base import AgentError, ToolContext
from .numerics_compare import rel_l2, resolve_tolerance
from .seeds import trial_seed

NUM_INPUT_SETS = 16  # at most; the worker uses as many as it takes to overflow the cache
NUM_SPOT_CHECKS = 3  # timed calls per arm whose outputs are checked
MIN_TIMED_CALLS = 5


@dataclass(frozen=True)
class Code:
    name: str  # "candidate" or "baseline": the arm, as the worker names it
    label: str  # what ran, for people
    entry: str
    source: str | None = None
    path: str | None = None  # as the sandbox sees it
    is_reference: bool = False  # the spec's reference: nothing to spot-check

    def payload(self) -> dict:
        return {"name": self.name, "entry": self.entry, "source": self.source, "path": self.path}


def kernel_of(ctx: ToolContext, name: str) -> Kernel:
    try:
        return ctx.workspace.kernel(name)
    except WorkspaceError as exc:
        raise AgentError(str(exc)) from None


def device_of(ctx: ToolContext) -> str:
    device = getattr(ctx.sandbox, "device", None)
    if device in ("cuda", "cpu"):
        return device
    from . import provenance

    return "cuda" if provenance.device_facts().get("gpus") else "cpu"


def dtype_of(spec: KernelSpec, dtype: str | None) -> str:
    if dtype is None:
        return spec.dtypes[0]
    if dtype not in spec.dtypes:
        raise AgentError(f"dtype {dtype!r} is not one of {spec.name}'s dtypes {list(spec.dtypes)}; pick one of those")
    return dtype


def itemsize(dtype: str) -> int:
    return ITEMSIZE[dtype]


def shapes_of(spec: KernelSpec, shapes: list[dict] | None, device: str) -> list[dict]:
    if not shapes:
        return [dict(s) for s in spec.shapes.get(device) or next(iter(spec.shapes.values()))]
    names = sorted({d for a in spec.args for d in a.shape if isinstance(d, str)})
    for shape in shapes:
        missing = [n for n in names if n not in shape]
        bad = {k: v for k, v in shape.items() if not isinstance(v, int) or v <= 0}
        if missing or bad:
            raise AgentError(f"shape {shape} must give positive integer sizes for {names} "
                             f"(missing {missing}, not positive {bad}); e.g. {dict(spec.shapes['cpu'][0])}")
    return [dict(s) for s in shapes]


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
    limits = [b for b in (_mem_available(), job_memory_bytes) if b]
    available = min(limits) if limits else None
    if available is not None and need > 0.8 * available:
        raise AgentError(
            f"shape {shape} ({dtype}) needs about {need / 2**30:.2f} GiB of host memory (one input set is "
            f"{set_bytes / 2**30:.2f} GiB; sets are rotated and drawn in float64), but only "
            f"{available / 2**30:.2f} GiB is available to a job (host free memory, sandbox limit): "
            "use smaller shapes")


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def candidate_code(ctx: ToolContext, kernel: Kernel, inp) -> Code:
    if inp.source is not None or inp.path is not None:
        return _agent_code(ctx, "candidate", inp.source, inp.path, inp.entry, "entry")
    return _impl_code(ctx, kernel, "candidate", inp.impl or next(iter(kernel.spec.impls)))


def baseline_code(ctx: ToolContext, kernel: Kernel, inp) -> Code | None:
    if inp.baseline_source is not None or inp.baseline_path is not None:
        if inp.baseline is not None:
            raise AgentError("give baseline (an impl or experiment id) or baseline_source/baseline_path, not both")
        return _agent_code(ctx, "baseline", inp.baseline_source, inp.baseline_path,
                           inp.baseline_entry or inp.entry, "baseline_entry")
    if inp.baseline is None:
        return None
    if inp.baseline == "reference" or inp.baseline in kernel.spec.impls:
        return _impl_code(ctx, kernel, "baseline", inp.baseline)
    record = ctx.experiment(inp.baseline)
    if record is None:
        raise AgentError(f"baseline {inp.baseline!r} is neither an implementation of {kernel.spec.name} "
                         f"({', '.join(['reference', *kernel.spec.impls])}) nor an experiment id "
                         "(list_experiments shows them)")
    args = record.get("arguments") or {}
    if (args.get("kernel") or record.get("kernel")) != kernel.spec.name:
        raise AgentError(f"experiment {inp.baseline} timed kernel {args.get('kernel')!r}, not "
                         f"{kernel.spec.name!r}: a baseline must compute the same function")
    if args.get("source") is not None or args.get("path") is not None:
        code = _agent_code(ctx, "baseline", args.get("source"), args.get("path"), args.get("entry"), "entry")
    else:
        code = _impl_code(ctx, kernel, "baseline", args.get("impl") or next(iter(kernel.spec.impls)))
    return dataclasses.replace(code, label=f"experiment {inp.baseline} ({code.label})")


def _impl_code(ctx: ToolContext, kernel: Kernel, name: str, impl: str) -> Code:
    spec = kernel.spec
    if impl == "reference":
        ref = spec.reference
    elif impl in spec.impls:
        ref = spec.impls[impl]
    else:
        raise AgentError(f"{spec.name} has no implementation {impl!r}; it has: "
                         f"{', '.join(['reference', *spec.impls])}")
    file_name, entry = ref.split(":", 1)
    return Code(name=name, label=impl, entry=entry, path=ctx.sandbox.workspace_path(kernel.folder / file_name),
                is_reference=impl == "reference")


def _agent_code(ctx: ToolContext, name: str, source: str | None, path: str | None, entry: str | None,
                entry_field: str) -> Code:
    if source is not None and path is not None:
        raise AgentError(f"give source or path for the {name}, not both")
    if not entry:
        raise AgentError(f"{entry_field} is required with source/path: the function to call in that code")
    if source is not None:
        return Code(name=name, label="source", entry=entry, source=source)
    try:
        host = ctx.workspace.file(path)
    except WorkspaceError as exc:
        raise AgentError(str(exc)) from None
    label = str(host.relative_to(ctx.workspace.root.resolve()))
    return Code(name=name, label=label, entry=entry, path=ctx.sandbox.workspace_path(host))


def _args_payload(spec: KernelSpec) -> list[dict]:
    return [{**dataclasses.asdict(a), "shape": list(a.shape)} for a in spec.args]


def _make_inputs_payload(ctx: ToolContext, kernel: Kernel) -> dict | None:
    if not kernel.spec.make_inputs:
        return None
    file_name, entry = kernel.spec.make_inputs.split(":", 1)
    return {"entry": entry, "path": ctx.sandbox.workspace_path(kernel.folder / file_name)}


async def time_shape(ctx: ToolContext, kernel: Kernel, arms: list[Code], shape: dict, dtype: str, device: str,
                     index: int, count: int, inp) -> tuple[dict, Path | None]:
    """Run the timing job for one shape; the raw result (form-checked) and its out dir."""
    state = ctx.workspace.state_dir
    seeds = [trial_seed(state, ctx.experiment_id, index, t) for t in range(NUM_INPUT_SETS)]
    payload = {
        "arms": [a.payload() for a in arms], "args": _args_payload(kernel.spec), "shape": shape, "dtype": dtype,
        "make_inputs": _make_inputs_payload(ctx, kernel), "input_seeds": seeds,
        "budget_ms": inp.budget_ms, "target_rel_se": inp.target_rel_se_pct / 100,
        "num_spot_checks": NUM_SPOT_CHECKS, "order_seed": trial_seed(state, ctx.experiment_id, index, NUM_INPUT_SETS),
        "cuda_graph": inp.cuda_graph,
    }
    timeout_s = 120.0 + 3 * inp.budget_ms / 1e3
    env = {"TRITON_INTERPRET": "1"} if device == "cpu" else {}
    label = ",".join(f"{k}={v}" for k, v in shape.items())

    async def progress(done: float, total: float | None = None, message: str = "") -> None:
        await ctx.progress(index + 0.5, count, f"shape {index + 1}/{count} ({label}): {message}")

    await ctx.progress(index, count, f"shape {index + 1}/{count} ({label}): timing")
    res: JobResult = await ctx.sandbox.run(Job(op="microbench", payload=payload, kind="timing",
                                               timeout_s=timeout_s, env=env), progress=progress)
    if not res.ok:
        raise AgentError(_job_failure(res, shape, timeout_s, inp.budget_ms))
    raw = dict(res.result)
    try:
        for a in arms:
            samples = [int(x) for x in raw["arms"][a.name]["samples_ns"]]
            if any(x <= 0 for x in samples):
                raise ValueError("non-positive time")
            raw["arms"][a.name]["samples_ns"] = samples
        raw["warmup"] = {"calls_per_arm": int(raw["warmup"]["calls_per_arm"]), "stable": bool(raw["warmup"]["stable"])}
        raw["device"] = dict(raw["device"])
    except (KeyError, TypeError, ValueError) as exc:
        raise AgentError(f"the timing job returned malformed data ({type(exc).__name__}: {exc}); "
                         "did the code print to or tamper with the harness? Rerun; report if it persists") from None
    fewest = min(len(raw["arms"][a.name]["samples_ns"]) for a in arms)
    if fewest < MIN_TIMED_CALLS:
        calls = (fewest + raw["warmup"]["calls_per_arm"]) * len(arms)
        per_call = float(raw.get("elapsed_ms") or inp.budget_ms) / max(calls, 1)
        # room for a warm-up of 2 windows and 4x the minimum timed calls, per arm
        suggest = per_call * len(arms) * (10 + 4 * MIN_TIMED_CALLS) / 0.75
        raise AgentError(f"only {fewest} timed calls fit in budget_ms={inp.budget_ms:g} at {shape} (about "
                         f"{per_call:.0f} ms per call); raise budget_ms to about {suggest:.0f} "
                         "or use a smaller shape")
    raw["_seeds"] = seeds  # ours, not the worker's
    return raw, res.out_dir


def _job_failure(res: JobResult, shape: dict, timeout_s: float, budget_ms: float) -> str:
    error = (res.error or res.stderr_tail[-800:] or "no message").strip()
    if res.status == "timeout":
        return (f"the timing job at {shape} passed its {timeout_s:.0f} s limit (budget_ms={budget_ms:g}): "
                "a single call is far too slow at this size (the Triton interpreter on CPU is ~1000x slower "
                "than a GPU); use smaller shapes")
    if "MemoryError" in error or "out of memory" in error.lower():
        return f"out of memory at {shape}: {error}. Use smaller shapes"
    if "raised on call" in error:
        return f"the code raised during timing at {shape}, so there is no timing: {error}"
    if res.status == "error":
        return f"the timing job failed at {shape}: {error}. Check the code with check_numerics first"
    return f"the timing job at {shape} ended '{res.status}': {error}"


async def spot_check(ctx: ToolContext, kernel: Kernel, raw: dict, out_dir: Path | None, shape: dict, dtype: str,
                     arms: list[Code], index: int) -> dict[str, dict]:
    """Compare the saved outputs of randomly chosen timed calls with the reference,
    recomputed in its own job from the input sets' seeds."""
    from ..sandbox.worker.tensors import load_tensors

    spec = kernel.spec
    checks = {a.name: {"spot_check": "skipped", "spot_check_detail": "the reference itself"} for a in arms}
    wanted = [c for c in raw.get("spot_checks", []) if isinstance(c, dict)
              and any(c.get("arm") == a.name and not a.is_reference for a in arms)]
    if not wanted or out_dir is None:
        for a in arms:
            if not a.is_reference:
                checks[a.name] = {"spot_check": "failed", "spot_check_detail": "no timed outputs were saved"}
        return checks
    wanted = [c for c in wanted if 0 <= _int(c.get("input_set")) < NUM_INPUT_SETS]
    sets = sorted({_int(c["input_set"]) for c in wanted})
    ref_file, ref_entry = spec.reference.split(":", 1)
    res = await ctx.sandbox.run(Job(op="reference", kind="run", timeout_s=300.0, payload={
        "reference": {"entry": ref_entry, "path": ctx.sandbox.workspace_path(kernel.folder / ref_file)},
        "args": _args_payload(spec), "make_inputs": _make_inputs_payload(ctx, kernel), "float64": True,
        "items": [{"key": f"set{s}", "shape": shape, "dtype": dtype, "seed": raw["_seeds"][s]} for s in sets]}))
    if not res.ok or res.out_dir is None:
        raise AgentError(f"the reference job for the spot-check failed ({res.status}: {res.error}); the spec's "
                         f"reference for {spec.name} needs fixing before anything can be timed against it")
    tol = resolve_tolerance(dtype, spec.tolerances, None)
    for a in arms:
        if a.is_reference:
            continue
        worst, failures, checked = None, [], []
        for c in (c for c in wanted if c.get("arm") == a.name):
            name, s = str(c.get("file", "")), _int(c["input_set"])
            checked.append(str(c.get("iteration")))
            try:
                if "/" in name or ".." in name or s not in sets:
                    raise ValueError(f"bad file name {name!r}")
                outs = _ordered(load_tensors(out_dir / name))
                refs = _ordered(load_tensors(res.out_dir / f"set{s}.ref.pt"))
            except Exception as exc:  # missing or unreadable evidence is a failure, not a pass
                failures.append(f"call {c.get('iteration')}: outputs unreadable ({exc})")
                continue
            if len(outs) != len(refs) or any(o.shape != r.shape for o, r in zip(outs, refs)):
                failures.append(f"call {c.get('iteration')}: output shapes {[list(o.shape) for o in outs]} "
                                f"!= reference {[list(r.shape) for r in refs]}")
                continue
            for j, (o, r) in enumerate(zip(outs, refs)):
                # rel L2 (inf on NaN/Inf where the reference is finite): the full error
                # report is check_numerics' job, and costs seconds on large outputs
                err = rel_l2(o, r)
                max_abs = float((o.double() - r.double()).abs().max()) if tol.max_abs is not None else 0.0
                worst = max(worst or 0.0, err)
                if not (err <= tol.rel_l2 and (tol.max_abs is None or max_abs <= tol.max_abs)):
                    failures.append(f"call {c.get('iteration')} output {j}: rel L2 {err:.3g} "
                                    f"(tolerance {tol.rel_l2:g}, {tol.source})")
        detail = f"timed calls {', '.join(checked)} checked; worst rel L2 {worst if worst is not None else 'n/a'}"
        checks[a.name] = ({"spot_check": "failed", "spot_check_detail": "; ".join(failures[:3]) + f" ({detail})"}
                          if failures or not checked else {"spot_check": "passed", "spot_check_detail": detail})
    return checks


def _int(x, default: int = -1) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return default


def _ordered(tensors: dict) -> list:
    return [tensors[k] for k in sorted(tensors, key=lambda k: int(k) if k.isdigit() else 1 << 30)]
