"""Issue 34, item 2: an output with unwritten elements has no error of 0. Where the candidate
is NaN/Inf and the reference finite, the error fields are null (undefined), an `expect` on them
is never supported, and `unwritten_output` names every output that has unwritten elements.

The kernel is the tests' own: two outputs, each with its own tail-mask bug. The witness is
the same kernel run in plain Python (a fresh interpreter, Triton interpreted, PyTorch's
fill_uninitialized_memory making unwritten elements NaN), counting the NaNs itself."""

import re

import pytest
from conftest import call, in_forked_child

pytestmark = pytest.mark.anyio

# a_out = 2x drops its last row (mask rows < T - 1): at T=1 it is never written at all;
# b_out = x + 1 drops its last element (mask offs < T*D - 1).
TWO_OUTPUTS = """
import torch
import triton
import triton.language as tl


@triton.jit
def scale_shift(x_ptr, a_ptr, b_ptr, T, D: tl.constexpr, BLOCK_T: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs = rows[:, None] * D + tl.arange(0, D)[None, :]
    x = tl.load(x_ptr + offs, mask=rows[:, None] < T, other=0.0)
    tl.store(a_ptr + offs, 2.0 * x, mask=rows[:, None] < T - 1)
    tl.store(b_ptr + offs, x + 1.0, mask=offs < T * D - 1)


def scale_shift_pair(x):
    T, D = x.shape
    a, b = torch.empty_like(x), torch.empty_like(x)
    scale_shift[(triton.cdiv(T, 4),)](x, a, b, T, D=D, BLOCK_T=4)
    return a, b
"""
REFERENCE = "def ref(x):\n    return 2.0 * x, x + 1.0\n"
D = 32


def _witness(source: str, T: int) -> list[dict]:
    """The kernel run by plain Python: per output, its NaN count and its rel L2 error."""
    import os

    os.environ["TRITON_INTERPRET"] = "1"
    import torch

    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # empty_like comes back NaN
    scope: dict = {}
    exec(compile(source, "candidate.py", "exec"), scope)
    x = torch.randn(T, D, generator=torch.Generator().manual_seed(0))
    got = scope["scale_shift_pair"](x)
    want = (2.0 * x.double(), x.double() + 1.0)
    rows = []
    for g, w in zip(got, want):
        finite = torch.isfinite(g)
        rows.append(
            {
                "nan": int(torch.isnan(g).sum()),
                "finite_only_rel_l2": float((g.double() - w)[finite].norm() / w[finite].norm())
                if bool(finite.any())
                else 0.0,
            }
        )
    return rows


def _ask(client, T: int):
    return call(
        client,
        "check_numerics",
        source=TWO_OUTPUTS,
        entry="scale_shift_pair",
        reference=REFERENCE,
        reference_entry="ref",
        args=[{"name": "x", "shape": ["T", D]}],
        shapes=[{"T": T}],
        dtypes=["float32"],
        trials=1,
        expect=["error_to_tolerance <= 0.5", "rel_l2_error < 1e-5", "max_abs_error < 1"],
    )


@pytest.mark.parametrize("T", [1, 7])
async def test_unwritten_outputs_have_no_error_and_every_one_is_named(zoo_client, T):
    witness = in_forked_child(_witness, TWO_OUTPUTS, T)
    # what plain Python sees: output 0 misses its last row (all of it at T=1), output 1 its
    # last element; the elements that were written are right (the old, finite-only, error)
    assert [w["nan"] for w in witness] == [D, 1]
    assert all(w["finite_only_rel_l2"] < 1e-6 for w in witness), witness

    out = await _ask(zoo_client, T)
    case = out["cases"][0]
    assert out["verdict"] == "fail" and case["verdict"] == "fail"
    errors = case["errors"]
    for field in ("rel_l2_error", "max_abs_error", "max_rel_error", "ulp_p50", "ulp_max"):
        assert errors[field] is None, (field, errors)
    assert errors["nonfinite_mismatches"] == D and errors["output_index"] == 0
    assert case["trial_rel_l2"] == [None]
    answer = out["hypothesis_answer"]
    assert [c["answer"] for c in answer["conditions"]] == ["inconclusive"] * 3
    assert answer["answer"] == "inconclusive"
    assert "rel L2 undefined" in out["summary"], out["summary"]

    unwritten = [f for f in out["findings"] if f["code"] == "unwritten_output"]
    assert len(unwritten) == 1, out["findings"]
    counts = {
        int(j): int(n)
        for j, n in re.findall(r"output (\d+) has (\d+) elements", unwritten[0]["message"])
    }
    assert counts == {j: w["nan"] for j, w in enumerate(witness)}, unwritten[0]["message"]
