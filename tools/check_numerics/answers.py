"""What check_numerics' jobs answered, parsed once where the job returns (jobs.py) into typed
records; the judge reads only these. Both answers are untrusted (the candidate shares its
worker's process; the reference may be the agent's too): every field is typed and bounded
here, and a record that cannot be read is dropped, so its absence is what the findings see."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..common.launch_config import LaunchConfigApplied, parse_applied

# Ops a Triton wrapper legitimately dispatches: allocation, views, copies, dtype moves.
MEMORY_OPS = frozenset(
    f"aten::{op}"
    for op in (
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "fill_",
        "zero_",
        "set_",
        "copy_",
        "view",
        "_unsafe_view",
        "reshape",
        "as_strided",
        "t",
        "transpose",
        "permute",
        "contiguous",
        "clone",
        "detach",
        "alias",
        "lift_fresh",
        "slice",
        "select",
        "unsqueeze",
        "squeeze",
        "expand",
        "split",
        "split_with_sizes",
        "chunk",
        "narrow",
        "_to_copy",
        "resize_",
        "unbind",
        "_local_scalar_dense",
        "is_nonzero",
        "arange",
        "lift_fresh_copy",
        "flatten",
        "unflatten",
    )
)


@dataclass(frozen=True)
class RefFacts:
    """What the reference job observed for one trial's key."""

    ops: tuple[str, ...] = ()  # aten ops the reference dispatched
    # its outputs' dtypes at the case dtype (traced on the meta device; None: unknown)
    native_dtypes: tuple[str | None, ...] = ()
    all_zero_inputs: tuple[bool, ...] = ()  # per input
    constant_outputs: tuple[bool, ...] = ()  # per output: one value everywhere


@dataclass(frozen=True)
class OutputFacts:
    """One returned value of a call, as the worker described it."""

    type: str
    is_tensor: bool
    is_plain: bool  # a plain torch.Tensor, not a subclass
    has_storage: bool
    shape: list[int] | None = None  # tensors only
    dtype: str | None = None
    device: str | None = None
    aliases_inputs: tuple[int, ...] = ()  # indices of the inputs it shares memory with


@dataclass(frozen=True)
class Call:
    """One call of the candidate in its worker, in call order."""

    key: str  # the trial's inputs
    kind: str  # protocol.CALL_FIRST, CALL_REPEAT, CALL_RECHECK or a rank's call
    index: int
    ops: dict[str, int]  # aten op -> times dispatched
    triton_launches: int
    triton_launch_errors: tuple[str, ...]
    interpreter_bf16_ops: int
    outputs: tuple[OutputFacts, ...] = ()  # empty when it raised
    error: str | None = None  # it raised: the exception
    traceback: str = ""
    diagnostic: str | None = None  # file:line:col and the source excerpt


@dataclass(frozen=True)
class CandidateRun:
    """One case's candidate job: the worker's word, parsed, and the sandbox's own facts."""

    calls: tuple[Call, ...]
    is_triton: bool  # the entry's module holds a Triton function (the worker's word)
    imports_triton: bool
    tampered: tuple[str, ...]  # what the candidate replaced in its process
    out_dir: Path | None  # the outputs it saved
    compiles: int  # Triton cache entries compiled: the sandbox's count
    launch_config_applied: LaunchConfigApplied | None = None  # the worker's record, an echo


def reference_facts(result) -> dict[str, RefFacts]:
    """The reference job's per-key facts (`{"items": {key: {...}}}`); unreadable ones are absent."""
    items = result.get("items") if isinstance(result, dict) else None
    facts = {}
    for key, item in (items or {}).items() if isinstance(items, dict) else ():
        try:
            facts[str(key)] = _ref_facts(item)
        except (AttributeError, TypeError, ValueError):
            continue
    return facts


def candidate_run(result, out_dir: Path | None, compiles: int) -> CandidateRun:
    worker = result if isinstance(result, dict) else {}
    calls = tuple(c for c in map(_call, worker.get("calls") or []) if c is not None)
    return CandidateRun(
        calls=calls,
        is_triton=bool(worker.get("is_triton")),
        imports_triton=worker.get("imports_triton") is True,
        tampered=tuple(str(t) for t in worker.get("tampered", []))[:20],
        out_dir=out_dir,
        compiles=compiles,
        launch_config_applied=parse_applied(worker.get("launch_config_applied")),
    )


def _ref_facts(item: dict) -> RefFacts:
    native = item.get("native_outputs")
    return RefFacts(
        ops=tuple(str(op) for op in item.get("ops", [])),
        native_dtypes=tuple(str(n.get("dtype")) if isinstance(n, dict) else None for n in native)
        if isinstance(native, list)
        else (),
        all_zero_inputs=tuple(bool(f.get("all_zero")) for f in item.get("inputs", [])),
        constant_outputs=tuple(bool(f.get("is_constant")) for f in item.get("outputs", [])),
    )


def _call(call) -> Call | None:
    """A worker's call record with the types the judges rely on, or None: the candidate
    shared the worker's process and could have bent what it reports."""
    if not isinstance(call, dict):
        return None
    try:
        launch_errors = list(call.get("triton_launch_errors") or [])[:5]
        common = dict(
            key=str(call["key"]),
            kind=str(call["kind"]),
            index=int(call["index"]),
            ops={str(k): int(v) for k, v in dict(call.get("ops") or {}).items()},
            triton_launches=int(call.get("triton_launches") or 0),
            triton_launch_errors=tuple(str(e)[:300] for e in launch_errors),
            interpreter_bf16_ops=int(call.get("interpreter_bf16_ops") or 0),
        )
        if "error" in call:
            diagnostic = str(call["diagnostic"])[:4000] if call.get("diagnostic") else None
            return Call(
                **common,
                error=str(call["error"])[:2000],
                traceback=str(call.get("traceback") or "")[-4000:],
                diagnostic=diagnostic,
            )
        outputs = [_output(o) for o in list(call.get("outputs") or [])[:64] if isinstance(o, dict)]
        return Call(**common, outputs=tuple(outputs))
    except (KeyError, TypeError, ValueError):
        return None


def _output(o: dict) -> OutputFacts:
    kind = dict(
        type=str(o.get("type"))[:200],
        is_tensor=o.get("is_tensor") is True,
        is_plain=o.get("is_plain") is True,
        has_storage=o.get("has_storage") is True,
    )
    if not kind["is_tensor"]:
        return OutputFacts(**kind)
    aliases = tuple(int(i) for i in list(o.get("aliases_inputs") or [])[:64])
    return OutputFacts(
        **kind,
        shape=[int(d) for d in list(o.get("shape") or [])[:16]],
        dtype=str(o.get("dtype")),
        device=str(o.get("device")),
        aliases_inputs=aliases,
    )
