"""Run a candidate on saved inputs and record raw facts; the parent judges.

Payload::

    {"candidate": {"entry": "fn", "path": "/ws/k/impl.py"} | {"entry": "fn", "source": "..."},
     "keys": ["c0t0", "c0t1", ...],      # trials of one case, in order; in_dir/<key>.inputs.pt
     "repeat": true,                      # run each trial twice (determinism, bitwise)
     "partition": {"args": {"0": 1}, "num_parts": 2} | None,   # input index -> split dim
     "launch_config": {"BLOCK_N": 128, "num_warps": 4} | None}  # launch_config.py

Per trial, in this order (the call index counts across the whole job):

1. ``first``: the inputs copied INTO THE SAME BUFFERS every trial (same data pointers,
   same shapes, new values), so a result cached by pointer or shape shows up as a
   stale output; every call gets the inputs in the layout they were saved in (strides,
   storage offset, views of one storage: tensors.py); outputs the candidate allocates are pre-filled with a sentinel NaN
   no arithmetic produces (protocol.UNWRITTEN_FLOAT_BITS; ints: max).
2. ``repeat``: fresh copies of the same inputs, for bitwise determinism.
3. ``rank<r>``: the inputs split as simulated tensor-parallel ranks, one call each.

and, last, ``recheck``: the first trial's inputs again (state carried across calls).

Written to out_dir (names: sandbox/worker/protocol.py): ``<key>.out.pt``,
``<key>.inputs_after.pt`` (inputs after the first call: the parent hashes them against
its own copy), ``<key>.repeat.pt``, ``<key>.rank<r>.pt``. Saved outputs are plain
tensors over the output's real storage, so a tensor subclass cannot show the parent
different values than it holds.

Each call's facts: aten ops, Triton launches (and launch errors), bfloat16 operations
the CPU interpreter executed, and for a call that raised, a diagnostic at the
candidate's file:line:col. The result says whether the candidate's module holds Triton.
"""

from __future__ import annotations

import inspect
import traceback
from pathlib import Path

import torch

from ..context import JobContext
from ..launch_config import LaunchConfigError, configured
from ..loader import check_arity, load_entry
from ..protocol import (
    CALL_FIRST,
    CALL_RECHECK,
    CALL_REPEAT,
    NumericsRunPayload,
    call_rank,
    inputs_after_file,
    inputs_file,
    output_file,
)
from ..tensors import clone_shared, copy_shared, load_tensors, save_tensors, to_device
from .numerics_watch import (
    SentinelFill,
    call_diagnostic,
    diagnostic_text,
    imports_triton,
    watch_triton,
)
from .reference import OpAudit

# Functions a candidate might replace to fool an in-process comparison.
WATCHED = (
    "torch.allclose",
    "torch.isclose",
    "torch.equal",
    "torch.testing.assert_close",
    "torch.Tensor.allclose",
    "torch.Tensor.__eq__",
    "torch.Tensor.equal",
    "torch.save",
    "torch.load",
    "numpy.allclose",
    "numpy.testing.assert_allclose",
    "numpy.array_equal",
)


def run(payload: NumericsRunPayload, ctx: JobContext) -> dict:
    watched_before = _watched()
    launches = watch_triton()
    cand = payload["candidate"]
    entry = load_entry(ctx, entry=cand["entry"], source=cand.get("source"), path=cand.get("path"))
    launches["where"] = _source_file(entry), cand.get("file_name")  # read by _call's diagnostics
    keys = payload["keys"]
    trials = [_load_inputs(ctx, key) for key in keys]
    check_arity(entry, len(trials[0]), cand["entry"])
    fn, overrides = configured(entry, payload.get("launch_config"))
    _prefill_with_nan()

    calls: list[dict] = []
    partition = payload.get("partition")
    buffers = clone_shared(trials[0])
    for i, (key, inputs) in enumerate(zip(keys, trials)):
        copy_shared(buffers, inputs)
        calls.append(
            _call(fn, buffers, key, CALL_FIRST, len(calls), launches, ctx, inputs_after=True)
        )
        if payload.get("repeat", True):
            calls.append(
                _call(fn, clone_shared(inputs), key, CALL_REPEAT, len(calls), launches, ctx)
            )
        if partition:
            for rank, shard in enumerate(_shards(inputs, partition)):
                calls.append(_call(fn, shard, key, call_rank(rank), len(calls), launches, ctx))
        ctx.progress(i + 1, len(keys), f"candidate {key}")
    if payload.get("repeat", True):
        # the first trial's inputs once more, last: a kernel right at first and wrong
        # later fails here, on inputs it already got right (an input-dependent bug cannot)
        calls.append(
            _call(fn, clone_shared(trials[0]), keys[0], CALL_RECHECK, len(calls), launches, ctx)
        )
    after = _watched()
    tampered = sorted(name for name, obj in watched_before.items() if after.get(name) is not obj)
    return {
        "is_triton": _uses_triton(entry),
        "imports_triton": imports_triton(entry),
        "calls": calls,
        "tampered": tampered,
        "launch_config_applied": overrides.applied(),
    }


def _prefill_with_nan() -> None:
    """A canonical NaN in every tensor the candidate allocates (FACTS.md), underneath
    SentinelFill's sentinel for the allocations it sees; warn_only keeps ops without a
    deterministic kernel usable. The C setter directly: the public one also imports
    torch._inductor's config (~9 s per job on 2 cores) to set a flag only compiled code
    reads."""
    try:
        torch._C._set_deterministic_algorithms(True, warn_only=True)
    except AttributeError:
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True


def _call(fn, inputs, key, kind, index, launches, ctx, inputs_after=False) -> dict:
    audit = OpAudit()
    launches.update(ok=0, errors=[], bf16_ops=0)
    fact = {"key": key, "kind": kind, "index": index}
    try:
        with SentinelFill(), audit:  # the audit innermost: it never counts the sentinel's fills
            out = fn(*inputs)
        if ctx.device == "cuda":
            torch.cuda.synchronize()
    except LaunchConfigError:
        raise  # the request's mistake, not the candidate's: the job fails with the names
    except Exception as exc:
        fact["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        lines = traceback.format_exception(
            type(exc), exc, exc.__traceback__.tb_next
        )  # from the agent's frame on
        fact["traceback"] = "".join(lines[:1] + lines[1:][-6:])
        file, file_name = launches["where"]
        diag = call_diagnostic(exc, file, file_name or (file.name if file else "?"))
        if diag is not None:
            fact["diagnostic"] = diagnostic_text(diag)
        out = None
    fact.update(
        ops=audit.counts,
        triton_launches=launches["ok"],
        triton_launch_errors=launches["errors"],
        interpreter_bf16_ops=launches["bf16_ops"],
    )
    if "error" not in fact:
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        fact["outputs"] = [_output_facts(o, inputs) for o in outs]
        plain = {str(j): p for j, o in enumerate(outs) if (p := _plain_view(o)) is not None}
        save_tensors(ctx.out_dir / output_file(key, kind), plain)
    if inputs_after:
        save_tensors(
            ctx.out_dir / inputs_after_file(key), {str(j): t for j, t in enumerate(inputs)}
        )
    return fact


def _output_facts(o, inputs: list[torch.Tensor]) -> dict:
    fact = {
        "type": f"{type(o).__module__}.{type(o).__qualname__}",
        "is_tensor": isinstance(o, torch.Tensor),
        "is_plain": type(o) is torch.Tensor,
    }
    if not isinstance(o, torch.Tensor):
        return fact
    with torch._C.DisableTorchFunctionSubclass():
        fact.update(
            shape=list(o.shape), dtype=str(o.dtype).removeprefix("torch."), device=o.device.type
        )
        span = _byte_span(o)
        fact["has_storage"] = span is not None
        fact["aliases_inputs"] = [
            j for j, t in enumerate(inputs) if span and _overlaps(span, _byte_span(t))
        ]
    return fact


def _byte_span(t: torch.Tensor) -> tuple[int, int] | None:
    """[start, end) of the bytes a tensor can reach, or None without real storage."""
    try:
        with torch._C.DisableTorchFunctionSubclass():
            storage = t.untyped_storage()
            base, nbytes = storage.data_ptr(), storage.nbytes()
            if t.numel() == 0:
                return (base, base)
            reach = sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride())) + 1
            start = base + t.storage_offset() * t.element_size()
            end = start + reach * t.element_size()
    except Exception:  # wrapper subclasses and fake tensors have no storage to read
        return None
    if base == 0 or end > base + nbytes:
        return None
    return (start, end)


def _overlaps(a, b) -> bool:
    return b is not None and a[0] < b[1] and b[0] < a[1]


def _plain_view(o) -> torch.Tensor | None:
    """The values the output's storage really holds, as a plain tensor."""
    if not isinstance(o, torch.Tensor) or _byte_span(o) is None:
        return None
    with torch._C.DisableTorchFunctionSubclass():
        plain = torch.empty(0, dtype=o.dtype, device=o.device)
        plain.set_(o.untyped_storage(), o.storage_offset(), o.shape, o.stride())
        return plain.detach().cpu().clone()


def _shards(inputs: list[torch.Tensor], partition: dict) -> list[list[torch.Tensor]]:
    """Rank r's inputs: split arguments cut into contiguous pieces (each rank of a
    tensor-parallel stack holds its own shard), the rest replicated in their layout."""
    parts = int(partition["num_parts"])
    split = {int(k): int(v) for k, v in partition["args"].items()}
    ranks = []
    for r in range(parts):
        ranks.append(
            [
                t.tensor_split(parts, dim=split[j])[r].contiguous() if j in split else c
                for j, (t, c) in enumerate(zip(inputs, clone_shared(inputs)))
            ]
        )
    return ranks


def _load_inputs(ctx: JobContext, key: str) -> list[torch.Tensor]:
    data = load_tensors(ctx.in_dir / inputs_file(key))
    return to_device([data[str(j)] for j in range(len(data))], ctx.device)


def _source_file(fn) -> Path | None:
    try:
        return Path(inspect.getsourcefile(inspect.unwrap(fn)) or "")
    except (TypeError, ValueError):
        return None


def _uses_triton(fn) -> bool:
    try:
        import triton.runtime.interpreter as interp
        import triton.runtime.jit as jit
    except Exception:
        return False
    kinds = (jit.JITFunction, jit.KernelInterface, interp.InterpretedFunction)
    return any(isinstance(v, kinds) for v in getattr(fn, "__globals__", {}).values())


def _watched() -> dict:
    return {name: _resolve(name) for name in WATCHED}


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part, None)
        return obj
    return None
