"""Generate seeded inputs and run the reference on them, in float64 where it can.

Payload::

    {"reference": {"entry": "fn", "path": "/ws/k/reference.py"} | {"entry": "fn", "source": "..."},
     "args": [{"name", "shape", "dtype", "distribution", "low", "high"}, ...],   # kernels/schema.py Arg
     "make_inputs": {"entry", "path"} | None,  # spec's custom generator, (shape, dtype, generator) -> list
     "items": [{"key": "c0t1", "shape": {"M": 4}, "dtype": "float32", "seed": 123,
                "distribution": None,
                "layout": "padded_rows", "layout_args": [0, 2]}],  # layouts.py; default as made
     "float64": true}

Inputs keep the layout they were made in (strides, storage offset, views of one storage:
tensors.save_tensors); a layout other than as_made re-lays the named arguments out
(layouts.py), the values unchanged. The reference gets its own copies (float64 where it can).

Writes ``<key>.inputs.pt`` (the inputs in the case dtype, keys "0", "1", ...) and
``<key>.ref.pt`` (the reference outputs, keys "0", ...) to out_dir. Returns raw facts
per key: output shapes and dtypes, the dtype the reference computed in, and which
inputs are all zero (a degenerate test). Runs in its own job, so the candidate never
shares a process with the reference or sees its outputs.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..context import JobContext
from ..layouts import AS_MADE, relayout
from ..loader import load_entry
from ..protocol import ReferencePayload, inputs_file, reference_file
from ..tensors import dtype_of, make_inputs, save_tensors, to_device


def run(payload: ReferencePayload, ctx: JobContext) -> dict:
    ref = payload["reference"]
    reference = load_entry(
        ctx,
        entry=ref["entry"],
        source=ref.get("source"),
        path=ref.get("path"),
        module_name="reference",
    )
    custom = payload.get("make_inputs")
    generator_fn = None
    if custom:
        generator_fn = load_entry(
            ctx,
            entry=custom["entry"],
            path=custom.get("path"),
            source=custom.get("source"),
            module_name="spec_inputs",
        )
    items = payload["items"]
    facts = {}
    for i, item in enumerate(items):
        inputs = generate(item, payload["args"], generator_fn, ctx.device)
        with OpAudit() as audit:
            outputs, compute_dtype = call_reference(
                reference, ref["entry"], inputs, item, use_float64=payload.get("float64", True)
            )
        save_tensors(
            ctx.out_dir / inputs_file(item["key"]), {str(j): t for j, t in enumerate(inputs)}
        )
        save_tensors(
            ctx.out_dir / reference_file(item["key"]), {str(j): t for j, t in enumerate(outputs)}
        )
        facts[item["key"]] = {
            "compute_dtype": compute_dtype,
            "inputs": [_describe(t) for t in inputs],
            "outputs": [_describe(t) for t in outputs],
            # what the reference returns in the case dtype (it ran in float64): the
            # dtypes a candidate's outputs should have; None when meta tensors can't tell
            "native_outputs": _native_outputs(reference, inputs),
            # aten ops the reference dispatched: a "custom kernel" that dispatches the
            # same compute ops is likely calling the reference's library path
            "ops": sorted(audit.counts),
        }
        ctx.progress(i + 1, len(items), f"reference {item['key']}")
    return {"items": facts}


def generate(item: dict, args: list[dict], generator_fn, device: str) -> list[torch.Tensor]:
    """The inputs of one trial, in the layout the spec makes them (views of one storage
    stay views of one storage) or in item["layout"] for the arguments item["layout_args"]
    names; values bit-identical for the same (args, shape, dtype, seed) in every layout."""
    if generator_fn is None:
        tensors = make_inputs(
            args,
            item["shape"],
            item["dtype"],
            item["seed"],
            device=device,
            distribution=item.get("distribution"),
        )
    else:
        gen = torch.Generator(device="cpu").manual_seed(item["seed"])
        made = generator_fn(item["shape"], dtype_of(item["dtype"]), gen)
        if not all(isinstance(t, torch.Tensor) for t in made):
            raise TypeError("the spec's make_inputs must return a list of tensors")
        tensors = to_device(list(made), device)
    layout = item.get("layout") or AS_MADE
    chosen = set(item.get("layout_args") or ())
    return [relayout(t, layout) if j in chosen else t for j, t in enumerate(tensors)]


def call_reference(
    fn, entry: str, inputs: list[torch.Tensor], item: dict, use_float64: bool
) -> tuple[list[torch.Tensor], str]:
    """Outputs as a list of tensors, and the dtype they were computed in."""
    upcast = use_float64 and any(t.is_floating_point() and t.dtype != torch.float64 for t in inputs)
    if upcast:
        wide = [t.to(torch.float64) if t.is_floating_point() else t for t in inputs]
        try:
            return _as_list(fn(*[t.clone() for t in wide]), entry), "float64"
        except Exception:
            pass  # e.g. an op without a float64 kernel: retry in the case dtype, which names the error
    try:
        out = fn(*[t.clone() for t in inputs])
    except Exception as exc:
        raise RuntimeError(
            f"the reference {entry} raised on case {item['key']} (shape {item['shape']}, dtype "
            f"{item['dtype']}): {type(exc).__name__}: {exc}"
        ) from exc
    return _as_list(out, entry), item["dtype"]


def _as_list(out, entry: str) -> list[torch.Tensor]:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not outs or not all(isinstance(t, torch.Tensor) for t in outs):
        raise TypeError(
            f"the reference {entry} must return a tensor or a tuple of tensors, "
            f"got {type(out).__name__}"
        )
    return [t.detach() for t in outs]


def _native_outputs(fn, inputs: list[torch.Tensor]) -> list[dict] | None:
    """Shapes and dtypes of the reference's outputs at the inputs' own dtypes, traced on
    the meta device (no data, no cost); data-dependent references cannot be traced."""
    try:
        outs = fn(*[t.to("meta") for t in inputs])
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        return [
            {"shape": list(o.shape), "dtype": str(o.dtype).removeprefix("torch.")} for o in outs
        ]
    except Exception:
        return None


def _describe(t: torch.Tensor) -> dict:
    return {
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "storage_offset": int(t.storage_offset()),
        "dtype": str(t.dtype).removeprefix("torch."),
        "all_zero": bool(t.numel() > 0 and not bool(t.ne(0).any())),
        "is_constant": bool(t.numel() > 1 and bool((t == t.reshape(-1)[0]).all())),
    }


class OpAudit(TorchDispatchMode):
    """Counts the aten ops dispatched inside the block ("aten::mm": 2)."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in dynamo.disable, whose first call
        # imports torch._dynamo (~800 modules, 3-6 s per job on 2 cores); we never compile.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))
