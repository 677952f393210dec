"""What numerics_run watches while the candidate runs, besides its aten ops (reference.OpAudit).

- ``SentinelFill``: outputs the candidate allocates and never writes hold a NaN whose
  payload no arithmetic produces (protocol.UNWRITTEN_FLOAT_BITS), so the judge tells an
  unwritten element from a NaN the kernel computed.
- ``watch_triton``: Triton launches (and the errors they raised), and, under the CPU
  interpreter, bfloat16 arithmetic, which the interpreter computes wrongly (docs/kernel-loop.md).
- ``call_diagnostic``: a call that raised, pointed at the candidate's file:line:col with
  compile_kernel's helpers (compile_diag).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..protocol import UNWRITTEN_FLOAT_BITS
from .compile_diag import compile_error_diagnostic, import_error_diagnostic

# aten ops that return memory nobody wrote (torch.empty, empty_like, new_empty, ...)
UNINITIALISED = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::empty_permuted",
    }
)
_BITS_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}


class SentinelFill(TorchDispatchMode):
    """Fills every uninitialised float tensor with the dtype's sentinel NaN (integers: the
    dtype's max). torch's own fill_uninitialized_memory stays on underneath as a fallback
    for memory this mode does not see (a canonical NaN: judged "computed", still an error)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as OpAudit: no torch._dynamo import per job

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.name in UNINITIALISED and isinstance(out, torch.Tensor) and out.numel():
            fill_sentinel(out)
        return out


def fill_sentinel(t: torch.Tensor) -> None:
    name = str(t.dtype).removeprefix("torch.")
    if name in UNWRITTEN_FLOAT_BITS:
        t.view(_BITS_VIEW[t.element_size()]).fill_(UNWRITTEN_FLOAT_BITS[name])
    elif t.dtype != torch.bool and not t.is_floating_point() and not t.is_complex():
        t.fill_(torch.iinfo(t.dtype).max)


def watch_triton() -> dict:
    """Counts Triton launches and the errors they raised (an error the candidate swallowed
    and then answered anyway is a library fallback), and under the interpreter the
    bfloat16 float operations it executed. The caller resets the counts per call."""
    state = {"ok": 0, "errors": [], "bf16_ops": 0}
    try:
        import triton.runtime.interpreter as interp
        import triton.runtime.jit as jit
    except Exception:
        return state
    for cls in (jit.JITFunction, interp.InterpretedFunction):
        original = cls.run

        def counted(self, *args, __original=original, **kwargs):
            try:
                result = __original(self, *args, **kwargs)
            except Exception as exc:
                state["errors"].append(
                    f"{getattr(self, '__name__', '?')}: {type(exc).__name__}: {exc}"[:300]
                )
                raise
            state["ok"] += 1
            return result

        cls.run = counted
    _watch_interpreter_bf16(interp, state)
    return state


def _watch_interpreter_bf16(interp, state: dict) -> None:
    """The interpreter keeps bfloat16 as its raw uint16 bits and applies numpy's arithmetic
    to them (triton/runtime/interpreter.py maps tl.bfloat16 to np.uint16): a product of
    two bf16 values is an integer product of bit patterns, and tl.dot multiplies them as
    numbers too. Count every elementwise op, fma, dot and reduction that sees a bf16
    operand; conversions (x.to(tl.float32)) are exact and not counted."""
    import triton.language as tl

    def is_bf16(handle) -> bool:
        dtype = getattr(handle, "dtype", None)
        return getattr(dtype, "scalar", dtype) == tl.bfloat16

    builder = interp.InterpreterBuilder
    for name in ("binary_op", "unary_op", "ternary_op", "create_fma", "create_dot"):
        original = getattr(builder, name, None)
        if original is None:
            continue

        def watched(self, *args, __original=original, **kwargs):
            if any(is_bf16(a) for a in args):
                state["bf16_ops"] += 1
            return __original(self, *args, **kwargs)

        setattr(builder, name, watched)
    reduce_ops = getattr(interp, "ReduceOps", None)
    if reduce_ops is not None and hasattr(reduce_ops, "apply_impl"):
        original_reduce = reduce_ops.apply_impl

        def watched_reduce(self, input, __original=original_reduce):
            if any(is_bf16(getattr(t, "handle", None)) for t in input):
                state["bf16_ops"] += 1
            return __original(self, input)

        reduce_ops.apply_impl = watched_reduce


def imports_triton(fn) -> bool:
    """The candidate's module holds Triton: the triton package or a Triton function."""
    try:
        import triton.runtime.interpreter as interp
        import triton.runtime.jit as jit
    except Exception:
        return False
    kinds = (jit.JITFunction, jit.KernelInterface, interp.InterpretedFunction)
    for value in getattr(fn, "__globals__", {}).values():
        module = getattr(value, "__name__", "") if type(value).__name__ == "module" else ""
        if isinstance(value, kinds) or module == "triton" or module.startswith("triton."):
            return True
    return False


def call_diagnostic(exc: BaseException, file: Path | None, file_name: str) -> dict | None:
    """Where in the candidate's file a call failed: a Triton CompilationError's node (GPU),
    else the deepest frame in the file of the innermost exception that has one (the
    interpreter raises InterpreterError from its own frames; the kernel's line is in the
    exception it wraps). None when no frame is in the file."""
    if file is None or not file.is_file():
        return None
    text = file.read_text(errors="replace")
    try:
        diag = compile_error_diagnostic(exc, file, file_name, text)
    except ImportError:
        diag = {"line": None}
    if diag.get("line") is not None:
        return diag
    chain, current = [], exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for err in reversed(chain):
        diag = import_error_diagnostic(err, file, file_name, text)
        if diag.get("line") is not None:
            return diag
    return None


def diagnostic_text(diag: dict) -> str:
    """`file:line:col: message` and the excerpt, as compile_kernel's errors read."""
    where = f"{diag['file']}:{diag['line']}" + (f":{diag['column']}" if diag.get("column") else "")
    return f"{where}: {diag['message']}" + (f"\n{diag['excerpt']}" if diag.get("excerpt") else "")
