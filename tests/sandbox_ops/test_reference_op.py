"""The reference op, run in-process on a JobContext over tmp folders."""

import dataclasses

import pytest
import torch

from infra_agent.kernels.workspace import load_workspace
from infra_agent.sandbox.worker.context import JobContext
from infra_agent.sandbox.worker.ops import reference
from infra_agent.sandbox.worker.tensors import load_tensors


def job_ctx(tmp_path):
    dirs = {n: tmp_path / n for n in ("job", "in", "out")}
    for d in dirs.values():
        d.mkdir(parents=True)
    return JobContext(
        job_dir=dirs["job"], in_dir=dirs["in"], out_dir=dirs["out"], workspace=None, device="cpu"
    )


def rmsnorm_payload(**item):
    kernel = load_workspace().kernel("rmsnorm")
    return {
        "reference": {"entry": "rmsnorm", "path": str(kernel.source_of(kernel.spec.reference))},
        "args": [dataclasses.asdict(a) for a in kernel.spec.args],
        "items": [
            {"key": "c0t0", "shape": {"M": 3, "N": 8}, "dtype": "float16", "seed": 7, **item}
        ],
    }


def test_inputs_in_case_dtype_reference_in_float64(tmp_path):
    ctx = job_ctx(tmp_path)
    facts = reference.run(rmsnorm_payload(), ctx)["items"]["c0t0"]
    assert facts["compute_dtype"] == "float64"
    inputs = load_tensors(ctx.out_dir / "c0t0.inputs.pt")
    ref = load_tensors(ctx.out_dir / "c0t0.ref.pt")["0"]
    assert inputs["0"].dtype == torch.float16 and inputs["0"].shape == (3, 8)
    assert ref.dtype == torch.float64
    x, w = inputs["0"].double(), inputs["1"].double()
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(ref, expected)
    # same seed, same inputs: the candidate job regenerates nothing, but microbench spot-checks may
    again = reference.run(rmsnorm_payload(), job_ctx(tmp_path / "again"))
    assert again["items"]["c0t0"]["inputs"] == facts["inputs"]
    assert not any(i["all_zero"] for i in facts["inputs"])


def test_a_reference_that_raises_names_itself(tmp_path):
    payload = rmsnorm_payload()
    payload["reference"] = {
        "entry": "bad",
        "source": "def bad(x, w):\n    raise ValueError('nope')\n",
    }
    with pytest.raises(RuntimeError, match="reference bad raised.*ValueError: nope"):
        reference.run(payload, job_ctx(tmp_path))
