"""The numerics_run op in-process: raw facts only, no verdicts."""

import dataclasses
import shutil
import sys

import pytest
import torch

from infra_agent.kernels.workspace import load_workspace
from infra_agent.sandbox.worker.context import JobContext
from infra_agent.sandbox.worker.loader import LoadError
from infra_agent.sandbox.worker.ops import numerics_run, reference
from infra_agent.sandbox.worker.tensors import load_tensors


@pytest.fixture(autouse=True)
def worker_process_state(monkeypatch):
    """The op sets process-wide state a fresh worker would drop; undo it here."""
    import triton.runtime.interpreter as interp
    import triton.runtime.jit as jit

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    saved = (
        jit.JITFunction.run,
        interp.InterpretedFunction.run,
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    # load_entry rewraps triton.language's @jit helpers for the interpreter (as a worker
    # would); later in-process tests compile Triton for real and need the originals
    helpers = {
        (name, attr): value
        for name, module in list(sys.modules.items())
        if module is not None and name.startswith("triton.language")
        for attr, value in vars(module).items()
        if type(value) is jit.JITFunction
    }
    yield
    for (name, attr), value in helpers.items():
        setattr(sys.modules[name], attr, value)
    jit.JITFunction.run, interp.InterpretedFunction.run = saved[0], saved[1]
    torch._C._set_deterministic_algorithms(saved[2], warn_only=saved[4])
    torch.utils.deterministic.fill_uninitialized_memory = saved[3]


def job_ctx(root):
    dirs = {n: root / n for n in ("job", "in", "out")}
    for d in dirs.values():
        d.mkdir(parents=True)
    return JobContext(
        job_dir=dirs["job"], in_dir=dirs["in"], out_dir=dirs["out"], workspace=None, device="cpu"
    )


def run_candidate(tmp_path, candidate, partition=None, trials=2, dtype="float32"):
    kernel = load_workspace().kernel("vector_add")
    ref_ctx = job_ctx(tmp_path / "ref")
    keys = [f"c0t{t}" for t in range(trials)]
    reference.run(
        {
            "reference": {
                "entry": "vector_add",
                "path": str(kernel.source_of(kernel.spec.reference)),
            },
            "args": [dataclasses.asdict(a) for a in kernel.spec.args],
            "items": [
                {"key": k, "shape": {"N": 100}, "dtype": dtype, "seed": t}
                for t, k in enumerate(keys)
            ],
        },
        ref_ctx,
    )
    ctx = job_ctx(tmp_path / "cand")
    for k in keys:
        shutil.copy(ref_ctx.out_dir / f"{k}.inputs.pt", ctx.in_dir / f"{k}.inputs.pt")
    result = numerics_run.run({"candidate": candidate, "keys": keys, "partition": partition}, ctx)
    return result, ctx


def test_honest_triton_kernel_facts(tmp_path):
    kernel = load_workspace().kernel("vector_add")
    cand = {"entry": "vector_add", "path": str(kernel.folder / "vector_add_triton.py")}
    result, ctx = run_candidate(
        tmp_path, cand, partition={"args": {"0": 0, "1": 0}, "num_parts": 2}
    )
    assert result["is_triton"] and result["tampered"] == []
    kinds = [c["kind"] for c in result["calls"]]
    assert kinds == ["first", "repeat", "rank0", "rank1"] * 2 + ["recheck"]
    first = result["calls"][0]
    assert first["triton_launches"] == 1 and first["triton_launch_errors"] == []
    assert "aten::add" not in first["ops"]
    assert first["outputs"][0] == {
        "type": "torch.Tensor",
        "is_tensor": True,
        "is_plain": True,
        "shape": [100],
        "dtype": "float32",
        "device": "cpu",
        "has_storage": True,
        "aliases_inputs": [],
    }
    inputs = load_tensors(tmp_path / "ref" / "out" / "c0t1.inputs.pt")
    out = load_tensors(ctx.out_dir / "c0t1.out.pt")["0"]
    torch.testing.assert_close(out, inputs["0"] + inputs["1"], rtol=0, atol=0)
    assert load_tensors(ctx.out_dir / "c0t1.rank1.pt")["0"].shape == (50,)


def test_aliasing_library_ops_and_tampering_are_recorded(tmp_path):
    source = (
        "import torch\n"
        "torch.allclose = lambda *a, **k: True\n"
        "def vector_add(x, y):\n"
        "    x.add_(y)\n"
        "    return x\n"
    )
    result, ctx = run_candidate(tmp_path, {"entry": "vector_add", "source": source}, trials=1)
    first = result["calls"][0]
    assert first["outputs"][0]["aliases_inputs"] == [0]
    assert first["ops"].get("aten::add_") == 1 and not result["is_triton"]
    assert result["tampered"] == ["torch.allclose"]
    original = load_tensors(tmp_path / "ref" / "out" / "c0t0.inputs.pt")["0"]
    assert not torch.equal(load_tensors(ctx.out_dir / "c0t0.inputs_after.pt")["0"], original)


def test_unwritten_output_is_nan_and_errors_are_facts(tmp_path):
    source = (
        "import torch\ndef vector_add(x, y):\n    if x.shape[0] < 100: raise ValueError('no shards')\n"
        "    return torch.empty_like(x)\n"
    )
    partition = {"args": {"0": 0, "1": 0}, "num_parts": 2}
    result, ctx = run_candidate(
        tmp_path, {"entry": "vector_add", "source": source}, partition=partition, trials=1
    )
    assert torch.isnan(load_tensors(ctx.out_dir / "c0t0.out.pt")["0"]).all()
    rank0 = result["calls"][2]
    assert (
        rank0["kind"] == "rank0"
        and rank0["error"] == "ValueError: no shards"
        and "outputs" not in rank0
    )
    bad = "def vector_add(x):\n    return x\n"
    with pytest.raises(LoadError, match="cannot be called with 2 positional arguments"):
        run_candidate(tmp_path / "bad", {"entry": "vector_add", "source": bad}, trials=1)


def test_unwritten_elements_hold_the_sentinel_computed_nans_do_not(tmp_path):
    source = (
        "import torch\ndef vector_add(x, y):\n    out = torch.empty_like(x)\n"
        "    out[:50] = (x[:50] - x[:50]) / (x[:50] - x[:50])  # 0/0: a NaN the arithmetic made\n"
        "    return out\n"
    )
    result, ctx = run_candidate(tmp_path, {"entry": "vector_add", "source": source}, trials=1)
    bits = load_tensors(ctx.out_dir / "c0t0.out.pt")["0"].view(torch.int32)
    assert (bits[50:] == 0x7FC5A5A5).all()  # never written: the sentinel, bit for bit
    assert torch.isnan(bits[:50].view(torch.float32)).all() and not (bits[:50] == 0x7FC5A5A5).any()


def test_a_raising_call_names_the_kernel_line(tmp_path):
    source = (
        "import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def k(x_ptr, o_ptr):\n    x = tl.load(x_ptr)\n    tl.static_assert(x.dtype == tl.float16, 'fp16')\n"
        "    tl.store(o_ptr, x)\n\ndef vector_add(x, y):\n    out = torch.empty_like(x)\n"
        "    k[(1,)](x, out)\n    return out\n"
    )
    cand = {"entry": "vector_add", "source": source, "file_name": "candidate.py"}
    result, _ = run_candidate(tmp_path, cand, trials=1)
    first = result["calls"][0]
    assert first["diagnostic"].startswith("candidate.py:8:5: AssertionError: fp16"), first[
        "diagnostic"
    ]
    assert result["imports_triton"] and first["triton_launch_errors"]


def test_bf16_arithmetic_under_the_interpreter_is_counted(tmp_path):
    kernel = load_workspace().kernel("vector_add")
    upcast = (kernel.folder / "vector_add_triton.py").read_text()
    native = upcast.replace("x.to(tl.float32) + y.to(tl.float32)", "x + y")
    assert native != upcast
    counts = {}
    for name, source in (("upcast", upcast), ("native", native)):
        result, _ = run_candidate(
            tmp_path / name, {"entry": "vector_add", "source": source}, trials=1, dtype="bfloat16"
        )
        counts[name] = result["calls"][0]["interpreter_bf16_ops"]
    assert counts == {"upcast": 0, "native": 1}  # one bf16 add per program; conversions are exact
