"""The one code resolver every tool uses: spec impls (one default rule), agent code, overrides."""

from __future__ import annotations

import dataclasses

import pytest

from infra_agent.kernels.coderef import (
    CodeRefError,
    default_impl,
    impl_code,
    ref_or_source,
    resolve_code,
    spec_code,
)
from infra_agent.kernels.schema import split_ref
from infra_agent.kernels.workspace import EMBEDDED_ROOT, WorkspaceError, load_workspace


def test_default_impl_is_triton_if_present_else_the_first():
    ws = load_workspace()
    assert default_impl(ws.kernel("rmsnorm")) == "triton"
    tp = ws.kernel("tp_linear")  # impls: tf32x3, tf32 (no 'triton')
    assert default_impl(tp) == next(iter(tp.spec.impls)) == "tf32x3"
    swapped = dataclasses.replace(
        tp,
        spec=dataclasses.replace(
            tp.spec, impls={"other": tp.spec.impls["tf32"], "triton": tp.spec.impls["tf32x3"]}
        ),
    )
    assert default_impl(swapped) == "triton"


def test_spec_impls_and_reference_resolve_to_files_in_the_kernel_folder():
    ws = load_workspace()
    k = ws.kernel("vector_add")
    code = resolve_code(ws, kernel=k)
    assert (code.impl, code.kernel, code.path) == (
        "triton",
        "vector_add",
        EMBEDDED_ROOT / "vector_add" / "vector_add_triton.py",
    )
    assert code.entry == "vector_add" and "def vector_add" in code.text()
    ref = impl_code(k, "reference", allow_reference=True)
    assert ref.is_reference and ref.path.name == "reference.py"
    with pytest.raises(CodeRefError, match="has no impl 'reference'; it has: triton"):
        impl_code(k, "reference")
    with pytest.raises(CodeRefError, match="it has: reference, triton"):
        impl_code(k, "nope", allow_reference=True)
    assert code.payload(lambda p: f"/job/{p.name}") == {
        "entry": "vector_add",
        "path": "/job/vector_add_triton.py",
    }
    assert spec_code(k, "reference.py:add").entry == "add"


def test_agent_code_wins_and_says_what_is_missing(tmp_path):
    ws = load_workspace()
    code = resolve_code(
        ws, kernel=ws.kernel("vector_add"), source="def f(x, y):\n    return x\n", entry="f"
    )
    assert code.kernel is None and code.payload(str) == {
        "entry": "f",
        "source": "def f(x, y):\n    return x\n",
    }
    with pytest.raises(CodeRefError, match="baseline_entry= is required"):
        resolve_code(ws, source="def f(): pass", entry_field="baseline_entry")
    assert resolve_code(ws, source="def f(): pass", require_entry=False).entry is None
    with pytest.raises(CodeRefError, match="not both"):
        resolve_code(ws, source="x", path="y", entry="f")
    with pytest.raises(CodeRefError, match="name the candidate"):
        resolve_code(ws, what="candidate")
    outside = tmp_path / "x.py"
    outside.write_text("def f():\n    pass\n")
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        resolve_code(ws, path=str(outside), entry="f")


def test_one_string_overrides_are_source_or_a_file_ref():
    ws = load_workspace()
    k = ws.kernel("rmsnorm")
    assert ref_or_source(ws, "def r(x, w):\n    return x\n", k, "r").source is not None
    assert (
        ref_or_source(ws, "reference.py:rmsnorm", k, None).path
        == EMBEDDED_ROOT / "rmsnorm" / "reference.py"
    )
    with pytest.raises(CodeRefError, match="must be 'file.py:function'"):
        ref_or_source(ws, "reference.py", k, None)
    with pytest.raises(CodeRefError, match="name the function"):
        ref_or_source(ws, "def r(x):\n    return x\n", k, None)
    assert split_ref("a.py:f") == ("a.py", "f")
