"""Judge one case (a shape and a dtype) of check_numerics from files the jobs wrote.

The reference job wrote the inputs and float64 reference outputs; the candidate job
wrote its outputs (first call, repeat, ranks) and the inputs as they were after the
first call. Everything the candidate wrote is untrusted: files are read with
``weights_only=True`` and a tensor of the wrong shape is never compared, only reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...sandbox.worker.protocol import (
    CALL_FIRST,
    COMPARED_CALLS,
    call_rank,
    inputs_after_file,
    inputs_file,
    output_file,
    reference_file,
)
from ...sandbox.worker.tensors import load_tensors
from ..base import AgentError
from ..common.error_metrics import compare, rel_l2
from ..common.tolerance import ResolvedTolerance
from .answers import Call, CandidateRun, RefFacts

# The dtypes a reference's traced output may name (anything else falls back to the case's).
OUTPUT_DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)


@dataclass
class CaseEvidence:
    label: str  # "N=4096 float32", used in messages
    dtype: str  # the case dtype as asked ("tf32" allowed)
    out_dtype: str  # the dtype the candidate's float outputs must have ("float32" for tf32)
    tol: ResolvedTolerance
    arg_names: list[str]
    keys: list[str]  # one per trial
    seeds: list[int]
    device: str
    ref_facts: dict[str, RefFacts]  # by key
    inputs: dict = field(default_factory=dict)  # key -> [Tensor]
    inputs_after: dict = field(default_factory=dict)  # key -> [Tensor] | None
    refs: dict = field(default_factory=dict)  # key -> [Tensor float64]
    calls: tuple[Call, ...] = ()  # worker facts, in call order
    outputs: dict = field(default_factory=dict)  # (key, kind) -> [Tensor | None]
    errors: dict = field(default_factory=dict)  # (key, kind) -> [compare() dict | None]
    is_triton: bool = False  # the entry's module holds a Triton function (the worker's word)
    # why the candidate is a Triton kernel ("": not declared one): its name, or its module
    # imports triton; such a candidate must launch a Triton kernel (findings._op_audit)
    declared_triton: str = ""
    tampered: tuple[str, ...] = ()

    def output_dtype(self, key: str, j: int, ref) -> str:
        """The dtype output j should have: the reference's own at the case dtype when it
        could be traced (e.g. float32 logits from float16 inputs), else the case's."""
        native = self.ref_facts.get(key, RefFacts()).native_dtypes
        if j < len(native) and native[j] in OUTPUT_DTYPES:
            return str(native[j])
        return self.out_dtype if ref.is_floating_point() else str(ref.dtype).removeprefix("torch.")

    def call_passes(self, key: str, kind: str) -> bool:
        errs = self.errors.get((key, kind))
        return bool(errs) and all(e is not None and passes(e, self.tol) for e in errs)


def passes(err: dict, tol: ResolvedTolerance) -> bool:
    return (
        err["nonfinite_mismatches"] == 0
        and err["rel_l2_error"] <= tol.rel_l2
        and (tol.max_abs is None or err["max_abs_error"] <= tol.max_abs)
    )


def load_evidence(ev: CaseEvidence, ref_dir: Path, run: CandidateRun) -> CaseEvidence:
    cand_dir = Path(run.out_dir or "/nonexistent")  # no folder: every output is missing
    ev.calls = run.calls
    ev.is_triton = run.is_triton
    if not ev.declared_triton and run.imports_triton:
        ev.declared_triton = "its module imports triton"
    ev.tampered = run.tampered
    for key in ev.keys:
        ev.inputs[key] = _as_list(load_tensors(ref_dir / inputs_file(key)))
        ev.refs[key] = _as_list(load_tensors(ref_dir / reference_file(key)))
        ev.inputs_after[key] = _load_optional(cand_dir / inputs_after_file(key))
    for call in ev.calls:
        key, kind = call.key, call.kind
        if key not in ev.refs or call.error is not None:
            continue
        saved = _load_optional(cand_dir / output_file(key, kind)) or []
        ev.outputs[(key, kind)] = saved
        if kind in COMPARED_CALLS:
            ev.errors[(key, kind)] = [
                compare_output(ev, key, saved, j) for j in range(len(ev.refs[key]))
            ]
    return ev


def compare_output(ev: CaseEvidence, key: str, saved: list, j: int) -> dict | None:
    """compare() for output j, or None when it is missing or has the wrong shape."""
    ref = ev.refs[key][j]
    if j >= len(saved) or saved[j] is None or tuple(saved[j].shape) != tuple(ref.shape):
        return None
    return compare(saved[j], ref, ev.output_dtype(key, j, ref), ev.tol.rel_l2)


def case_errors(ev: CaseEvidence) -> tuple[dict | None, list[float | None], bool]:
    """The worst (trial, output) comparison of first calls, each trial's rel L2, and
    whether every trial passed."""
    worst, per_trial, ok = None, [], True
    for t, key in enumerate(ev.keys):
        errs = ev.errors.get((key, CALL_FIRST), [None])
        ok = ok and ev.call_passes(key, CALL_FIRST)
        usable = [e for e in errs if e is not None]
        per_trial.append(
            max((e["rel_l2_error"] for e in usable), default=None)
            if len(usable) == len(errs)
            else None
        )
        for j, e in enumerate(errs):
            if e is not None and (worst is None or _badness(e) > _badness(worst)):
                worst = {**e, "trial": t, "output_index": j}
    return worst, per_trial, ok


def op_totals(ev: CaseEvidence) -> tuple[dict[str, int], int]:
    """aten op counts and Triton launches over the first call of every trial."""
    ops: dict[str, int] = {}
    launches = 0
    for call in ev.calls:
        if call.kind == CALL_FIRST and call.error is None:
            launches += call.triton_launches
            for op, n in call.ops.items():
                ops[op] = ops.get(op, 0) + n
    return dict(sorted(ops.items())), launches


def partition_result(ev: CaseEvidence, partition: dict) -> dict | None:
    """Partitioned (ranks combined) vs unpartitioned vs reference, worst trial."""
    worst = None
    for t, key in enumerate(ev.keys):
        ranks = [ev.outputs.get((key, call_rank(r))) for r in range(partition["num_parts"])]
        first = ev.outputs.get((key, CALL_FIRST))
        if not first or any(not r for r in ranks):
            continue
        for j, ref in enumerate(ev.refs[key]):
            shards = [r[j] if j < len(r) else None for r in ranks]
            if any(s is None for s in shards) or j >= len(first) or first[j] is None:
                continue
            try:
                if partition["combine"] == "sum":
                    order = partition.get("sum_order") or list(range(len(shards)))
                    combined = shards[order[0]].clone()
                    for r in order[1:]:
                        combined = (
                            combined + shards[r]
                        )  # an all-reduce in the given order, in the output dtype
                else:
                    combined = torch.cat(shards, dim=partition["out_dim"])
            except IndexError:  # torch.cat's "dimension out of range": the agent's out_dim
                raise AgentError(
                    f"partition out_dim={partition['out_dim']} does not exist in output {j}, which has "
                    f"{shards[0].dim()} dimensions; give out_dim in [-{shards[0].dim()}, "
                    f"{shards[0].dim() - 1}]"
                ) from None
            except RuntimeError:
                continue  # shard shapes that cannot combine; reported as shapes below
            if tuple(combined.shape) != tuple(ref.shape) or tuple(first[j].shape) != tuple(
                ref.shape
            ):
                continue
            dtype = ev.output_dtype(key, j, ref)
            vs_ref = compare(combined, ref, dtype, ev.tol.rel_l2)
            vs_unpart = compare(combined, first[j], dtype, ev.tol.rel_l2)
            first_errors = (
                ev.errors.get((key, CALL_FIRST)) or []
            )  # load_evidence compared it already
            unpartitioned = (first_errors[j] if j < len(first_errors) else None) or compare(
                first[j], ref, dtype, ev.tol.rel_l2
            )
            unpartitioned_passes = passes(unpartitioned, ev.tol)
            row = {
                "trial": t,
                "output_index": j,
                "partitioned_vs_reference_rel_l2": vs_ref["rel_l2_error"],
                "unpartitioned_vs_reference_rel_l2": rel_l2(first[j], ref),
                "partitioned_vs_unpartitioned_rel_l2": vs_unpart["rel_l2_error"],
                "partitioned_vs_unpartitioned_max_abs": vs_unpart["max_abs_error"],
                "most_divergent_index": vs_unpart["worst_index"],
                "most_divergent_partitioned": vs_unpart["worst_candidate"],
                "most_divergent_unpartitioned": vs_unpart["worst_reference"],
                "most_divergent_reference": _at(ref, vs_unpart["worst_index"]),
                "is_within_tolerance": passes(vs_ref, ev.tol) and passes(vs_unpart, ev.tol),
                # the partition's own fault: the two runs differ beyond the tolerance, or only the
                # partitioned one misses the reference; a miss both share is the case's verdict
                "diverges": not passes(vs_unpart, ev.tol)
                or (unpartitioned_passes and not passes(vs_ref, ev.tol)),
            }
            if worst is None or _worse_partition(row, worst):
                worst = row
    return worst


def _worse_partition(a: dict, b: dict) -> bool:
    return _partition_badness(a) > _partition_badness(b)


def _partition_badness(r: dict) -> tuple:
    return (
        r["diverges"],
        not r["is_within_tolerance"],
        r["partitioned_vs_unpartitioned_rel_l2"],
        r["partitioned_vs_reference_rel_l2"],
    )


def _badness(e: dict) -> tuple:
    return (e["nonfinite_mismatches"], e["rel_l2_error"])


def _at(t, idx: list[int]) -> float | None:
    v = float(t[tuple(idx)]) if t.numel() else None
    return v if v is not None and v == v and abs(v) != float("inf") else None


def _as_list(data: dict) -> list:
    return [data[str(j)] for j in range(len(data)) if str(j) in data]


def _load_optional(path: Path) -> list | None:
    if path.is_symlink() or not path.is_file():  # a link could point the parent at a host file
        return None
    try:
        data = load_tensors(path)
    except Exception:  # untrusted file: unreadable is "no output", reported by the findings
        return None
    n = max((int(k) for k in data if k.isdigit()), default=-1) + 1
    return [data.get(str(j)) for j in range(n)]
