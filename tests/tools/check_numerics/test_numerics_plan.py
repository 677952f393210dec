"""check_numerics planning, without running anything."""

import pytest
from conftest import copy_zoo

from infra_agent.kernels.workspace import load_workspace
from infra_agent.tools.base import AgentError
from infra_agent.tools.check_numerics.lock import lock_kernel
from infra_agent.tools.check_numerics.plan import make_plan
from infra_agent.tools.check_numerics.schema import Input


class PathsAsIs:
    def workspace_path(self, host_path):
        return str(host_path)


def plan(ws, device="cpu", **kw):
    return make_plan(Input(**kw), ws, PathsAsIs(), device, lambda c, t: 1000 * c + t)


def test_cases_seeds_and_tf32_storage():
    p = plan(
        load_workspace(),
        kernel="tp_linear",
        impl="tf32",
        dtypes=["float32", "tf32"],
        trials=2,
        layouts=[],
    )
    assert [(c.dtype, c.storage_dtype, c.tol.rel_l2, c.tol.source) for c in p.cases][::2] == [
        ("float32", "float32", 1e-5, "spec"),
        ("tf32", "float32", 5e-4, "dtype default"),
    ]
    assert p.cases[1].seeds == [1000, 1001] and p.cases[1].keys == ["c1t0", "c1t1"]
    assert p.partition["args"] == {"0": 1, "1": 1} and p.partition["combine"] == "sum"
    assert p.candidate["entry"] == "linear_tf32" and "aten::mm" in p.forbidden_ops


def test_layouts_are_tried_on_the_smallest_shape_of_each_dtype_with_its_seeds():
    p = plan(load_workspace(), kernel="kda_decode", dtypes=["float32"], layouts=["padded_rows"])
    assert [c.layout for c in p.cases] == ["as_made", "as_made"]  # every argument: contiguous
    assert p.layout_notes == [
        "padded_rows not tried on q, k, v, g, beta, state, norm_weight, gate: the spec declares "
        "q: contiguous, k: contiguous, v: contiguous, g: contiguous, beta: contiguous, "
        "state: contiguous, norm_weight: contiguous, gate: contiguous (Arg.layout)"
    ]
    p = plan(load_workspace(), kernel="rmsnorm", dtypes=["float32", "float16"])
    made = {(c.dtype, tuple(c.shape.items())): c for c in p.cases if c.layout == "as_made"}
    tried = [c for c in p.cases if c.layout != "as_made"]
    assert [(c.layout, c.dtype) for c in tried] == [
        ("padded_rows", "float32"),
        ("padded_rows", "float16"),
    ]
    for c in tried:
        base = p.cases[c.base]
        smallest = min(
            (m for m in made.values() if m.dtype == c.dtype),
            key=lambda m: m.shape["M"] * m.shape["N"] + m.shape["N"],
        )
        assert base is smallest and c.seeds == base.seeds and c.shape == base.shape
        assert c.layout_args == [0, 1] and c.label == f"{base.label} padded_rows"
    every = plan(load_workspace(), kernel="rmsnorm", dtypes=["float32"], layout_shapes="all")
    assert sum(c.layout == "padded_rows" for c in every.cases) == len(made) // 2


def test_cuda_adds_gpu_shapes_within_budget():
    cpu, cuda = (
        plan(load_workspace(), kernel="vector_add"),
        plan(load_workspace(), "cuda", kernel="vector_add"),
    )
    assert len(cuda.cases) > len(cpu.cases)
    assert max(c.shape["N"] for c in cuda.cases) <= 1 << 24
    with pytest.raises(AgentError, match="use fewer trials"):
        plan(load_workspace(), "cuda", kernel="vector_add", trials=20)


def test_files_outside_the_workspace_are_refused(tmp_path):
    outside = tmp_path / "x.py"
    outside.write_text("def f(x, y):\n    return x\n")
    with pytest.raises(AgentError, match="outside the workspace"):
        plan(load_workspace(), kernel="vector_add", path=str(outside), entry="f")
    with pytest.raises(AgentError, match="entry= is required"):
        plan(load_workspace(), kernel="vector_add", source="def f(x, y): return x")
    with pytest.raises(AgentError, match="permutation"):
        plan(
            load_workspace(),
            kernel="vector_add",
            partition={"args": {"x": 0}, "num_parts": 2, "combine": "sum", "sum_order": [0, 0]},
        )


def test_lock_notes_for_overrides(tmp_path):
    root = copy_zoo(tmp_path)
    lock_kernel(load_workspace(root), "rmsnorm")
    ws = load_workspace(root)
    assert plan(ws, kernel="rmsnorm").notes == []
    assert plan(ws, kernel="rmsnorm", tolerance=1e-9).notes == []  # tighter is fine
    notes = plan(ws, kernel="rmsnorm", tolerance=0.1, reference="reference.py:rmsnorm").notes
    assert any("replaces the locked reference" in n for n in notes) and any(
        "looser" in n for n in notes
    )


def test_what_ran_names_candidate_shapes_and_dtypes_and_how_it_is_triton():
    p = plan(
        load_workspace(),
        kernel="vector_add",
        shapes=[{"N": n} for n in range(1, 9)],
        dtypes=["float16"],
    )
    assert (
        p.what_ran
        == "vector_add/triton on shapes [N=1; N=2; N=3; N=4; N=5; N=6; +2 more] x dtypes [float16]"
        " + layouts [padded_rows]"
    )
    assert p.triton_by_name == "the spec names the impl 'triton'"
    assert p.candidate["file_name"] == "vector_add/vector_add_triton.py"
    adhoc = plan(
        load_workspace(), kernel="vector_add", source="def f(x, y):\n    return x + y\n", entry="f"
    )
    assert adhoc.triton_by_name == "" and adhoc.candidate["file_name"] == "candidate.py"
