"""check_numerics, step 1: turn the agent's arguments into a plan (pure, no side effects).

Resolves what runs (candidate), what it is compared with (reference), on what (cases:
shapes x dtypes, with seeds), how tolerant (argument > spec > dtype table), how it is
partitioned, and whether a human lock pins the acceptance criteria.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ...kernels.coderef import (
    REFERENCE,
    CodeRefError,
    impl_code,
    ref_or_source,
    resolve_code,
    spec_code,
    split_ref,
)
from ...kernels.workspace import WorkspaceError
from ...sandbox.worker.layouts import ACCEPTS, AS_MADE
from ..base import AgentError, as_agent_error
from ..common.cases import MAX_NUMERICS_CASES, check_case_count, distinct
from ..common.tolerance import DTYPE_TOLERANCES, ResolvedTolerance, resolve_tolerance
from .lock import LockStatus, check_lock

MAX_ELEMENTS_PER_ARG = 1 << 26  # 64 Mi elements: a check, not a benchmark
MAX_ELEMENTS_PER_CASE = (
    1 << 27
)  # all arguments x trials: bounds the judge's memory (~10 copies of this)
DEFAULT_GPU_ELEMENTS_PER_ARG = 1 << 24  # default CUDA shapes up to 16 Mi elements per argument
SUMMARY_SHAPES = 6  # shapes the summary line names; the cases list has them all
STORAGE_DTYPE = {"tf32": "float32"}  # case dtypes that are a math mode, not a storage type


@dataclass
class Case:
    index: int
    shape: dict[str, int]
    dtype: str  # as asked (may be "tf32")
    storage_dtype: str  # what tensors hold
    tol: ResolvedTolerance
    seeds: list[int]
    keys: list[str]
    layout: str = AS_MADE  # sandbox/worker/layouts.py
    layout_args: list[int] = field(default_factory=list)  # argument indices re-laid out
    base: int | None = None  # the as-made case of the same shape and dtype (same seeds)

    @property
    def label(self) -> str:
        named = " ".join(f"{k}={v}" for k, v in self.shape.items()) + f" {self.dtype}"
        return named if self.layout == AS_MADE else f"{named} {self.layout}"


@dataclass
class Plan:
    candidate: dict  # {"entry", "path"|"source"} as the worker sees it
    candidate_name: str
    reference: dict
    args: list[dict]
    make_inputs: dict | None
    cases: list[Case]
    partition: (
        dict | None
    )  # {"args": {index: dim}, "num_parts", "combine", "out_dim", "names": {name: dim}}
    forbidden_ops: tuple[str, ...]
    lock: LockStatus | None
    kernel: str | None
    distribution: str | None = None  # float inputs' draw override (tensors.make_inputs)
    notes: list[str] = field(default_factory=list)  # lock-related problems, in words
    # why the candidate counts as a Triton kernel by name ("" when its name does not say);
    # the worker adds "its module imports triton" (judge.py)
    triton_by_name: str = ""
    launch_config: dict | None = None  # the candidate's (sandbox/worker/launch_config.py)
    layout_notes: list[str] = field(default_factory=list)  # layouts not tried, and why

    @property
    def what_ran(self) -> str:
        """The candidate, its shapes and dtypes, for summary lines."""
        shapes = list(
            dict.fromkeys(" ".join(f"{k}={v}" for k, v in c.shape.items()) for c in self.cases)
        )
        layouts = list(dict.fromkeys(c.layout for c in self.cases if c.layout != AS_MADE))
        more = f"; +{len(shapes) - SUMMARY_SHAPES} more" if len(shapes) > SUMMARY_SHAPES else ""
        dtypes = ", ".join(dict.fromkeys(c.dtype for c in self.cases))
        config = f" under launch_config {self.launch_config}" if self.launch_config else ""
        named = "; ".join(shapes[:SUMMARY_SHAPES])
        tried = f" + layouts [{', '.join(layouts)}]" if layouts else ""
        return f"{self.candidate_name}{config} on shapes [{named}{more}] x dtypes [{dtypes}]{tried}"


def make_plan(inp, workspace, sandbox, device: str, seed_of) -> Plan:
    """`seed_of(case_index, trial) -> int`; `sandbox.workspace_path(host) -> str`."""
    kernel = workspace.kernel(inp.kernel) if inp.kernel else None
    spec = kernel.spec if kernel else None
    if spec is None and not (inp.args and inp.reference and inp.shapes):
        raise AgentError(
            "without kernel= give args=, reference= and shapes= (or name a kernel from list_kernels)"
        )
    candidate, name, triton_by_name = _candidate(inp, kernel, workspace, sandbox)
    reference = _reference(inp, kernel, workspace, sandbox)
    args = (
        [dataclasses.asdict(a) for a in spec.args]
        if spec and not inp.args
        else [a.model_dump() for a in inp.args]
    )
    shapes = (
        distinct([dict(s) for s in inp.shapes]) if inp.shapes else _default_shapes(spec, device)
    )
    if not shapes:
        raise AgentError("no shapes: pass shapes=[{...}] naming every dimension of the arguments")
    dtypes = distinct(inp.dtypes or (list(spec.dtypes) if spec else ["float32"]))
    check_case_count(len(shapes) * len(dtypes), MAX_NUMERICS_CASES, "cases (shapes x dtypes)")
    # sizes the spec's own shapes name beyond the arguments' (e.g. one only its cost model or
    # make_inputs reads, such as Hk when q and k are views of one fused qkv)
    spec_sizes = {k for s in (spec.shapes.values() if spec else ()) for shape in s for k in shape}
    for shape in shapes:
        _check_shape(shape, args, spec_sizes)
        total = (
            sum(_numel(d if isinstance(d, int) else shape[d] for d in a["shape"]) for a in args)
            * inp.trials
        )
        if total > MAX_ELEMENTS_PER_CASE:
            raise AgentError(
                f"shape {shape} x {inp.trials} trials is {total} input elements, more than "
                f"{MAX_ELEMENTS_PER_CASE} (the judge holds every trial's tensors): use fewer trials or "
                "smaller shapes"
            )
    cases = []
    for dtype in dtypes:
        if dtype not in DTYPE_TOLERANCES:
            raise AgentError(
                f"dtype {dtype!r} is not checkable; use one of {', '.join(DTYPE_TOLERANCES)}"
            )
        tol = resolve_tolerance(dtype, spec.tolerances if spec else None, inp.tolerance)
        for shape in shapes:
            i = len(cases)
            seeds = [seed_of(i, t) for t in range(inp.trials)]
            cases.append(
                Case(
                    i,
                    shape,
                    dtype,
                    STORAGE_DTYPE.get(dtype, dtype),
                    tol,
                    seeds,
                    [f"c{i}t{t}" for t in range(inp.trials)],
                )
            )
    layout_notes = _layout_cases(cases, args, inp)
    lock = check_lock(workspace, spec.name) if spec else None
    notes = _lock_notes(inp, lock)
    make_inputs = None
    if spec and spec.make_inputs and not inp.args:
        make_inputs = spec_code(kernel, spec.make_inputs).payload(sandbox.workspace_path)
    return Plan(
        candidate,
        name,
        reference,
        args,
        make_inputs,
        cases,
        _partition(inp, spec, args),
        tuple(spec.forbidden_ops) if spec else (),
        lock,
        spec.name if spec else None,
        inp.distribution,
        notes,
        triton_by_name,
        dict(inp.launch_config) if inp.launch_config else None,
        layout_notes,
    )


def _layout_cases(cases: list[Case], args: list[dict], inp) -> list[str]:
    """Append a case per asked layout on the smallest shape of each dtype (or every shape),
    with the as-made case's seeds: the same values, other strides. Only arguments whose
    declared layout accepts it are re-laid out; a layout no argument accepts is not tried.
    Returns what was not tried, and why."""
    notes = []
    for layout in dict.fromkeys(getattr(inp, "layouts", None) or ()):
        chosen = [j for j, a in enumerate(args) if layout in ACCEPTS[_accepts(a)]]
        refused = [a["name"] for j, a in enumerate(args) if j not in chosen]
        if refused:
            notes.append(
                f"{layout} not tried on {', '.join(refused)}: the spec declares "
                + ", ".join(f"{a['name']}: {_accepts(a)}" for a in args if a["name"] in refused)
                + " (Arg.layout)"
            )
        if not chosen:
            continue
        for base in _layout_bases(cases, args, inp.layout_shapes):
            i = len(cases)
            cases.append(
                dataclasses.replace(
                    base,
                    index=i,
                    keys=[f"c{i}t{t}" for t in range(len(base.seeds))],
                    layout=layout,
                    layout_args=chosen,
                    base=base.index,
                )
            )
    return notes


def _accepts(arg: dict) -> str:
    return arg.get("layout") or "last_dim_contiguous"


def _layout_bases(cases: list[Case], args: list[dict], which: str) -> list[Case]:
    """The as-made cases a layout is tried on: all, or the smallest shape of each dtype
    (fewest input elements)."""
    made = [c for c in cases if c.layout == AS_MADE]
    if which == "all":
        return made
    smallest: dict[str, Case] = {}
    for c in made:
        if c.dtype not in smallest or _elements(c.shape, args) < _elements(
            smallest[c.dtype].shape, args
        ):
            smallest[c.dtype] = c
    return list(smallest.values())


def _elements(shape: dict, args: list[dict]) -> int:
    return sum(_numel(d if isinstance(d, int) else shape[d] for d in a["shape"]) for a in args)


def _default_shapes(spec, device: str) -> list[dict]:
    """The spec's small set; on CUDA also its GPU shapes that fit the numerics budget
    (large grids find boundary bugs small ones miss; the biggest are benchmark sizes)."""
    shapes = [dict(s) for s in spec.shapes.get("cpu", ())]
    if device == "cuda":
        for shape in spec.shapes.get("gpu", ()):
            sizes = [_numel(a.dims(shape)) for a in spec.args]
            if max(sizes, default=0) <= DEFAULT_GPU_ELEMENTS_PER_ARG and dict(shape) not in shapes:
                shapes.append(dict(shape))
    return shapes


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _candidate(inp, kernel, workspace, sandbox) -> tuple[dict, str, str]:
    """(payload, display name, why its name declares Triton or "")."""
    with as_agent_error(WorkspaceError):
        code = resolve_code(
            workspace,
            kernel=kernel,
            impl=inp.impl,
            source=inp.source,
            path=inp.path,
            entry=inp.entry,
            what="candidate",
        )
    payload = code.payload(sandbox.workspace_path)
    if code.kernel is not None:
        name = f"{code.kernel}/{code.impl}"
        payload["file_name"] = f"{code.kernel}/{code.path.name}" if code.path else "candidate.py"
    elif code.source is not None:
        name = f"source:{code.entry}"
        payload["file_name"] = "candidate.py"  # as compile_kernel names inline source
    else:
        name = f"{inp.path}:{code.entry}"
        payload["file_name"] = str(inp.path)
    by_name = ""
    if code.impl and "triton" in code.impl.lower():
        by_name = f"the spec names the impl {code.impl!r}"
    elif code.path is not None and "triton" in code.path.name.lower():
        by_name = f"its file is named {code.path.name!r}"
    return payload, name, by_name


def _reference(inp, kernel, workspace, sandbox) -> dict:
    with as_agent_error(WorkspaceError):
        if inp.reference is None:
            return impl_code(kernel, REFERENCE, allow_reference=True).payload(
                sandbox.workspace_path
            )
        default_entry = split_ref(kernel.spec.reference)[1] if kernel else inp.entry
        try:
            code = ref_or_source(
                workspace, inp.reference, kernel, inp.reference_entry or default_entry
            )
        except CodeRefError as exc:
            raise AgentError(
                f"reference=: {exc}; give 'file.py:function', or Python source with "
                "reference_entry= (the function to call)"
            ) from None
    return code.payload(sandbox.workspace_path)


def _check_shape(shape: dict, args: list[dict], spec_sizes: set[str]) -> None:
    needed = {d for a in args for d in a["shape"] if isinstance(d, str)}
    missing, unknown = sorted(needed - set(shape)), sorted(set(shape) - needed - spec_sizes)
    if missing or unknown:
        raise AgentError(
            f"shape {shape} does not match the arguments "
            f"{[(a['name'], list(a['shape'])) for a in args]}: "
            + (f"missing {missing}" if missing else "")
            + (f" unknown {unknown}" if unknown else "")
            + f" (known sizes: {sorted(needed | spec_sizes)})"
        )
    for a in args:
        dims = [d if isinstance(d, int) else shape[d] for d in a["shape"]]
        numel = 1
        for d in dims:
            if not isinstance(d, int) or d <= 0:
                raise AgentError(
                    f"shape {shape}: argument {a['name']} gets size {dims}; sizes must be positive "
                    f"integers"
                )
            numel *= d
        if numel > MAX_ELEMENTS_PER_ARG:
            raise AgentError(
                f"shape {shape}: argument {a['name']} has {numel} elements, more than "
                f"{MAX_ELEMENTS_PER_ARG}; "
                "numerics need coverage, not size: use smaller shapes"
            )


def _partition(inp, spec, args: list[dict]) -> dict | None:
    names = [a["name"] for a in args]
    p = inp.partition
    if p is False or (p is None and (spec is None or spec.partition is None)):
        return None
    if p is None or p is True:
        if spec is None or spec.partition is None:
            raise AgentError(
                "partition=true but the kernel spec declares no partition; pass "
                "partition={args: {name: dim}, num_parts, combine, out_dim}"
            )
        sp = spec.partition
        split, parts, combine, out_dim = dict(sp.args), sp.num_parts, sp.combine, sp.out_dim
        order = list(range(parts))
    else:
        split, parts, combine, out_dim = dict(p.args), p.num_parts, p.combine, p.out_dim
        order = list(p.sum_order) if p.sum_order is not None else list(range(parts))
        if sorted(order) != list(range(parts)):
            raise AgentError(f"sum_order {order} must be a permutation of the ranks 0..{parts - 1}")
    bad = sorted(set(split) - set(names))
    if bad:
        raise AgentError(f"partition splits {bad}, which are not arguments; arguments are {names}")
    for name, dim in split.items():
        ndim = len(args[names.index(name)]["shape"])
        if not -ndim <= dim < ndim:
            raise AgentError(
                f"partition splits {name!r} along dim {dim}, but it has {ndim} dimensions"
            )
    return {
        "args": {str(names.index(n)): d for n, d in split.items()},
        "num_parts": parts,
        "combine": combine,
        "out_dim": out_dim,
        "names": split,
        "sum_order": order,
    }


def _lock_notes(inp, lock: LockStatus | None) -> list[str]:
    if lock is None or not lock.locked:
        return []
    notes = list(lock.changes)
    if inp.reference is not None:
        notes.append("reference= replaces the locked reference")
    locked_tols = (lock.record or {}).get("tolerances", {})
    if inp.tolerance is not None:
        looser = [d for d, t in locked_tols.items() if inp.tolerance > t.get("rel_l2", 0)]
        if looser or not locked_tols:
            notes.append(
                f"tolerance={inp.tolerance} is looser than the locked tolerance for {looser or 'all dtypes'}"
            )
    return notes
