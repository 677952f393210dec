"""Integrity findings: the ways a candidate can look right without being right.

Each detector reads the evidence of one case (evidence.py) and returns
findings that name the trick and where it showed. Severity "error" means the verdict
cannot pass; "warning" is worth a look but does not fail the check. The facts come from
the worker (untrusted: the candidate shared its process), so what the parent can
recompute from files it does: outputs, input mutation, caching, constant output.
"""

from __future__ import annotations

import torch

from ...sandbox.worker.protocol import (
    CALL_FIRST,
    CALL_RECHECK,
    CALL_REPEAT,
    UNWRITTEN_FLOAT_BITS,
    is_rank_call,
)
from ..common.error_metrics import representable_fraction, round_to
from ..common.tolerance import LOWER_PRECISION
from .answers import MEMORY_OPS, RefFacts
from .evidence import CaseEvidence
from .schema import CHECKS, Finding


def case_findings(
    ev: CaseEvidence, forbidden_ops: tuple[str, ...], enabled: set[str]
) -> list[Finding]:
    found: list[Finding] = []
    for detect in (
        _unwritten,
        _mutation,
        _output_facts,
        _determinism,
        _caching_and_state,
        _op_audit,
        _tampering,
        _precision,
        _degenerate,
    ):
        found.extend(detect(ev, forbidden_ops))
    allowed = {code for name in enabled for code in CHECKS.get(name, ())}
    return [f for f in found if f.code in allowed]


def call_findings(ev: CaseEvidence) -> list[Finding]:
    """Calls that raised after the first: a rank that cannot run its shard, or a later trial."""
    found = []
    for call in ev.calls:
        if call.error is None:
            continue
        rank = is_rank_call(call.kind)
        found.append(
            Finding(
                code="partition_unsupported" if rank else "candidate_raised",
                severity="warning" if rank else "error",
                case=ev.label,
                message=f"call {call.index} ({call.kind}, {call.key}) raised "
                f"{call.error}" + (": the kernel cannot run on one rank's shard" if rank else ""),
            )
        )
    return found[:3]


def _f(ev: CaseEvidence, code: str, severity: str, message: str) -> Finding:
    return Finding(code=code, severity=severity, message=message, case=ev.label)


def _first_calls(ev: CaseEvidence):
    for call in ev.calls:
        if call.kind == CALL_FIRST and call.error is None:
            yield call


def _unwritten(ev, _):
    """An element still holding the pre-fill (the sentinel NaN's exact bits, a payload no
    arithmetic produces: protocol.UNWRITTEN_FLOAT_BITS; an integer dtype's max) where the
    reference differs was never written; any other NaN/Inf where the reference is finite,
    canonical NaNs included, was computed (garbage arithmetic, overflow). Every output is
    named, each at the first trial it showed in: one finding per code."""
    unwritten: dict[int, str] = {}  # output index -> what showed, first trial only
    computed: dict[int, str] = {}
    for t, key in enumerate(ev.keys):
        outs = ev.outputs.get((key, CALL_FIRST)) or []
        for j, err in enumerate(ev.errors.get((key, CALL_FIRST), [])):
            if j in unwritten or not err or j >= len(outs) or outs[j] is None:
                continue
            out, ref = outs[j], ev.refs[key][j]
            if out.dtype == torch.bool:
                continue
            held = _unwritten_elements(out, ref, err)
            if held is not None and bool(held.any()):
                first = [int(i) for i in held.nonzero()[0]]
                unwritten[j] = (
                    f"output {j} has {int(held.sum())} elements still holding the pre-fill "
                    f"({'a sentinel NaN' if out.is_floating_point() else 'the dtype max'}) where the "
                    f"reference differs (trial {t}, first at {first})"
                )
                computed.pop(j, None)
            elif out.is_floating_point() and err["nonfinite_mismatches"] and j not in computed:
                computed[j] = (
                    f"output {j} has {err['nonfinite_mismatches']} NaN/Inf elements where the "
                    f"reference is finite (trial {t}, first at {err['worst_index']})"
                )
    found = []
    if unwritten:
        found.append(
            _f(
                ev,
                "unwritten_output",
                "error",
                "; ".join(unwritten[j] for j in sorted(unwritten))
                + ": never written (e.g. torch.empty_like returned as is, or a store mask that "
                "misses elements)",
            )
        )
    if computed:
        found.append(
            _f(
                ev,
                "nonfinite_output",
                "error",
                "; ".join(computed[j] for j in sorted(computed))
                + ": not the pre-fill sentinel, so computed, e.g. overflow, 0/0, or arithmetic on "
                "misread data",
            )
        )
    return found


def _unwritten_elements(out, ref, err: dict):
    """Where `out` still holds the pre-fill and the reference differs (None: no sentinel for
    this dtype, or nothing non-finite to look at)."""
    if not out.is_floating_point():
        top = torch.iinfo(out.dtype).max
        return (out == top) & (ref != top)
    sentinel = UNWRITTEN_FLOAT_BITS.get(str(out.dtype).removeprefix("torch."))
    if not err["nonfinite_mismatches"] or sentinel is None:
        return None
    return (_bits(out) == _signed(sentinel, out.element_size())) & torch.isfinite(ref)


def _signed(bits: int, size: int) -> int:
    """Raw bits as the signed integer _bits() compares them with."""
    return bits - (1 << (8 * size)) if bits >= 1 << (8 * size - 1) else bits


def _mutation(ev, _):
    for key in ev.keys:
        after = ev.inputs_after.get(key)
        if after is None:
            continue
        for j, (before, now) in enumerate(zip(ev.inputs[key], after)):
            if (
                now is None
                or now.shape != before.shape
                or not torch.equal(_bits(now), _bits(before))
            ):
                name = ev.arg_names[j] if j < len(ev.arg_names) else str(j)
                changed = before.numel()
                if now is not None and now.shape == before.shape:
                    changed = int((_bits(now) != _bits(before)).sum())
                return [
                    _f(
                        ev,
                        "input_mutation",
                        "error",
                        f"argument {name!r} was modified by the call ({changed} elements changed): a kernel must "
                        "not write its inputs (the caller's tensors, and later calls, see the damage)",
                    )
                ]
        outside = _written_outside_views(ev.inputs[key], after)
        if outside:
            return [_f(ev, "input_mutation", "error", outside)]
    return []


def _written_outside_views(before: list, after: list) -> str:
    """Inputs that are views (a slice of a fused qkv, padded rows) let a kernel reach bytes
    no argument shows: the storages are compared whole, padding and unused parts too."""
    for j, (b, a) in enumerate(zip(before, after)):
        if a is None:
            continue
        sb, sa = b.untyped_storage(), a.untyped_storage()
        if sb.nbytes() != sa.nbytes():
            continue  # a storage of another size: the candidate's worker saved something else
        raw = [torch.empty(0, dtype=torch.uint8).set_(s) for s in (sb, sa)]
        if not torch.equal(*raw):
            changed = int((raw[0] != raw[1]).sum())
            return (
                f"the storage under argument {j} ({tuple(b.shape)}, strides {tuple(b.stride())}, "
                f"offset {b.storage_offset()}) changed in {changed} bytes outside every argument's "
                "elements: the kernel wrote past its view (padding, or another slice of the same "
                "buffer); compute addresses from the strides and mask the row's end"
            )
    return ""


def _output_facts(ev, _):
    found = []
    for call in _first_calls(ev):
        outs = call.outputs
        refs = ev.refs[call.key]
        if len(outs) != len(refs):
            found.append(
                _f(
                    ev,
                    "wrong_output",
                    "error",
                    f"returned {len(outs)} outputs, the reference returns {len(refs)}",
                )
            )
        for j, (o, ref) in enumerate(zip(outs, refs)):
            if not o.is_tensor or not o.is_plain or not o.has_storage:
                found.append(
                    _f(
                        ev,
                        "not_plain_tensor",
                        "error",
                        f"output {j} is a {o.type} (plain torch.Tensor: {o.is_plain}, real "
                        f"storage: "
                        f"{o.has_storage}): a tensor subclass or lazy wrapper can compute on access or "
                        "fool comparisons; its raw storage was compared instead",
                    )
                )
            elif o.aliases_inputs:
                names = [
                    ev.arg_names[i] if i < len(ev.arg_names) else str(i) for i in o.aliases_inputs
                ]
                found.append(
                    _f(
                        ev,
                        "output_aliases_input",
                        "error",
                        f"output {j} shares memory with input {', '.join(map(repr, names))}: the kernel "
                        f"returned "
                        "its input or a view of it instead of a fresh result",
                    )
                )
            expected = (list(ref.shape), ev.output_dtype(call.key, j, ref), ev.device)
            got = (o.shape, o.dtype, o.device)
            if o.is_tensor and got != expected:
                found.append(
                    _f(
                        ev,
                        "wrong_output",
                        "error",
                        f"output {j} is shape/dtype/device {got}, expected {expected}",
                    )
                )
        if found:
            return found
    return found


def _determinism(ev, _):
    for key in ev.keys:
        a, b = ev.outputs.get((key, CALL_FIRST)), ev.outputs.get((key, CALL_REPEAT))
        if not a or not b:
            continue
        for j, (x, y) in enumerate(zip(a, b)):
            if (
                x is not None
                and y is not None
                and x.shape == y.shape
                and not torch.equal(_bits(x), _bits(y))
            ):
                diff = _bits(x) != _bits(y)
                where = [int(i) for i in diff.nonzero()[0]] if diff.ndim else []
                return [
                    _f(
                        ev,
                        "nondeterministic",
                        "warning",
                        f"output {j}: two calls on identical inputs differ bitwise in {int(diff.sum())} elements "
                        f"(first at {where}): unordered atomics, races, or state carried between calls",
                    )
                ]
    return []


def _caching_and_state(ev, _):
    for prev, key in zip(ev.keys, ev.keys[1:]):
        a, b = ev.outputs.get((prev, CALL_FIRST)), ev.outputs.get((key, CALL_FIRST))
        same_ref = all(torch.equal(x, y) for x, y in zip(ev.refs[prev], ev.refs[key]))
        # a correct answer for trial t-1, returned again for trial t's new values
        if a and b and not same_ref and ev.call_passes(prev, CALL_FIRST) and _same_bits(a, b):
            return [
                _f(
                    ev,
                    "result_caching",
                    "error",
                    f"trial {ev.keys.index(key)} returned trial {ev.keys.index(prev)}'s output bit for bit "
                    "although its inputs differ (same buffers and shapes, new values): a result cached by data "
                    "pointer or shape",
                )
            ]
    # The same inputs right once and wrong later: the answer depends on the call count.
    first = ev.keys[0]
    if _passed_then_failed(ev, first, CALL_RECHECK):
        n = len([c for c in ev.calls if c.kind != CALL_RECHECK]) + 1
        return [
            _f(
                ev,
                "stateful_output",
                "error",
                f"trial 0's inputs matched the reference on call 1 and not when run again as call {n}: the result "
                "depends on how many times the kernel was called (correct for the first k calls, then garbage)",
            )
        ]
    for key in ev.keys:
        if _passed_then_failed(ev, key, CALL_REPEAT):
            return [
                _f(
                    ev,
                    "stateful_output",
                    "error",
                    f"trial {ev.keys.index(key)}: the first call matched the reference and the second, on the same "
                    "inputs, did not: state carried from call to call",
                )
            ]
    return []


def _op_audit(ev, forbidden_ops):
    found = []
    ops: dict[str, int] = {}
    launches, launch_errors = 0, []
    for call in _first_calls(ev):
        for op, n in call.ops.items():
            ops[op] = ops.get(op, 0) + n
        launches += call.triton_launches
        launch_errors += call.triton_launch_errors
    banned = sorted(op for op in ops if op in forbidden_ops)
    if banned:
        found.append(
            _f(
                ev,
                "forbidden_op",
                "error",
                f"dispatched {', '.join(banned)}, which the kernel spec forbids "
                f"in an "
                "implementation (the library op, not a custom kernel, did the work)",
            )
        )
    library = sorted(op for op in ops if op not in MEMORY_OPS)
    if launch_errors:
        found.append(
            _f(
                ev,
                "fallback_to_library",
                "error",
                f"a Triton launch raised ({launch_errors[0]}) and the call still returned, via "
                f"{', '.join(library) or 'other code'}: "
                "a try/except fallback hides the kernel's failure",
            )
        )
    elif ev.declared_triton and launches == 0 and any(True for _ in _first_calls(ev)):
        # a Triton kernel by name or import that launched nothing: torch computed the result,
        # whether or not the file also holds an (unused) @triton.jit
        found.append(
            _f(
                ev,
                "no_triton_launch",
                "error",
                f"declared a Triton kernel ({ev.declared_triton}) but launched no Triton kernel in "
                f"{len(ev.keys)} call(s); the result came from "
                f"{'torch ops ' + ', '.join(library) if library else 'code outside Triton'}: launch the "
                "kernel (kernel[grid](...)) from the entry function",
            )
        )
    elif (ev.is_triton or launches) and library and not banned:
        ref_ops = {op for f in ev.ref_facts.values() for op in f.ops if op not in MEMORY_OPS}
        # every compute op of the reference, dispatched again: the reference's own path ran
        # (one shared op, e.g. a scale multiply in a wrapper, is only worth a warning)
        same = sorted(ref_ops) if ref_ops and ref_ops <= set(library) else []
        found.append(
            _f(
                ev,
                "library_ops_in_custom_kernel",
                "error" if same else "warning",
                f"a Triton implementation dispatched all of the reference's compute ops ({', '.join(same)}): "
                "the library, not the kernel, computed the result"
                if same
                else f"a Triton implementation also dispatched torch compute ops {', '.join(library)}: check that "
                "the kernel, not the library, computes the result",
            )
        )
    return found


def _tampering(ev, _):
    if not ev.tampered:
        return []
    return [
        _f(
            ev,
            "comparison_tampering",
            "error",
            f"the candidate replaced {', '.join(ev.tampered)} in its own process: monkeypatching the comparison has "
            "no effect here (the verdict is computed outside the candidate's process), but it is reported",
        )
    ]


def _precision(ev, _):
    """Results exactly representable in a narrower format than declared: it computed there."""
    for key in ev.keys:
        outs = ev.outputs.get((key, CALL_FIRST)) or []
        for j, (o, ref) in enumerate(zip(outs, ev.refs[key])):
            if (
                o is None
                or not o.is_floating_point()
                or o.shape != ref.shape
                or ev.call_passes(key, CALL_FIRST)
            ):
                continue
            stored = ev.output_dtype(key, j, ref)
            declared = ev.dtype if ev.dtype == "tf32" else stored
            for lower in LOWER_PRECISION.get(declared, ()):
                honest = representable_fraction(round_to(ref, stored), lower)
                got = representable_fraction(o, lower)
                if got > 0.9 and honest < 0.1:
                    return [
                        _f(
                            ev,
                            "lower_precision_than_declared",
                            "error",
                            f"output {j}: {got:.0%} of elements are exact {lower} values (the {stored} "
                            f"reference rounded: {honest:.1%}): the kernel computed in {lower}, not {declared}",
                        )
                    ]
    return []


def _degenerate(ev, _):
    found = []
    for key in ev.keys:
        facts = ev.ref_facts.get(key, RefFacts())
        zero_inputs = [
            ev.arg_names[i]
            for i, zero in enumerate(facts.all_zero_inputs)
            if zero and i < len(ev.arg_names)
        ]
        flat_refs = [j for j, constant in enumerate(facts.constant_outputs) if constant]
        if zero_inputs or flat_refs:
            if zero_inputs:
                what = f"inputs {zero_inputs} are all zero"
            else:
                what = f"reference output {flat_refs[0]} has no variance"
            return [
                _f(
                    ev,
                    "degenerate_reference",
                    "error",
                    f"{what} (trial {ev.keys.index(key)}): a constant answer would pass, so this case proves "
                    "nothing; use other shapes, distribution or inputs",
                )
            ]
        for j, o in enumerate(ev.outputs.get((key, CALL_FIRST)) or []):
            is_constant = o is not None and o.numel() > 1 and bool((o == o.reshape(-1)[0]).all())
            if is_constant and not ev.call_passes(key, CALL_FIRST):
                found.append(
                    _f(
                        ev,
                        "constant_output",
                        "error",
                        f"output {j} is the constant {float(o.reshape(-1)[0])} "
                        "everywhere while the reference varies: a placeholder result",
                    )
                )
                return found
    return found


def _same_bits(a: list, b: list) -> bool:
    """Every output of two calls present, of one shape, and equal bit for bit."""
    return all(
        x is not None and y is not None and x.shape == y.shape and torch.equal(_bits(x), _bits(y))
        for x, y in zip(a, b)
    )


def _passed_then_failed(ev, key: str, later: str) -> bool:
    """The first call of `key` matched the reference and the `later` call on the same inputs did not."""
    return (
        ev.call_passes(key, CALL_FIRST)
        and (key, later) in ev.errors
        and not ev.call_passes(key, later)
    )


def _bits(t):
    """The raw bits, so NaN == NaN and -0.0 != 0.0 (bitwise comparison)."""
    sizes = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(sizes[t.element_size()]) if t.element_size() in sizes else t
