"""The workspace loader: the embedded zoo, user workspaces, and specs that fail."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from infra_agent.kernels.schema import KernelSpec
from infra_agent.kernels.workspace import EMBEDDED_ROOT, WorkspaceError, load_workspace


def test_embedded_zoo_loads_both_kernels():
    ws = load_workspace()
    assert ws.is_embedded and ws.errors == {}
    assert {"rmsnorm", "vector_add"} <= set(ws.kernels)
    assert {k.folder.name for k in ws.kernels.values()} == {
        p.parent.name for p in EMBEDDED_ROOT.glob("*/spec.py")
    }
    rms = ws.kernel("rmsnorm")
    assert isinstance(rms.spec, KernelSpec) and rms.folder == EMBEDDED_ROOT / "rmsnorm"
    assert rms.source_of(rms.spec.impls["triton"]).name == "rmsnorm_triton.py"
    assert rms.spec.flops({"M": 2, "N": 8}) == 4 * 2 * 8 + 2
    assert rms.spec.bytes({"M": 2, "N": 8}, 2) == (2 * 2 * 8 + 8) * 2
    assert set(rms.spec.tolerances) == set(rms.spec.dtypes)
    # the embedded zoo may be read-only: its state lives under the user's state directory
    assert EMBEDDED_ROOT not in ws.state_dir.parents


def test_copied_workspace_keeps_state_inside(workspace):
    ws = load_workspace(workspace)
    assert not ws.is_embedded and ws.state_dir == workspace.resolve() / ".infra-agent"
    assert sorted(ws.kernels) == sorted(load_workspace().kernels)


def test_missing_workspace_and_unknown_kernel_say_what_to_do(tmp_path):
    with pytest.raises(WorkspaceError, match="does not exist.*--workspace"):
        load_workspace(tmp_path / "nope")
    ws = load_workspace()
    with pytest.raises(
        WorkspaceError,
        match="unknown kernel 'nope'; this workspace has: .*rmsnorm.*vector_add.*list_kernels",
    ):
        ws.kernel("nope")


def test_default_kernels_folder_config_and_serve_profiles(tmp_path):
    root = tmp_path / "user"
    shutil.copytree(EMBEDDED_ROOT / "vector_add", root / "kernels" / "vector_add")
    ws = load_workspace(root)  # no config: kernels/ is the default search path
    assert list(ws.kernels) == ["vector_add"]

    (root / "more").mkdir()
    shutil.copytree(EMBEDDED_ROOT / "rmsnorm", root / "more" / "rmsnorm")
    (root / "infra-agent.toml").write_text(
        textwrap.dedent("""
        [kernels]
        paths = ["kernels", "more/rmsnorm"]
        [serve.profiles.tiny]
        engine = "builtin"
        [acceptance.decode_latency]
        metric = "tpot_p50_ms"
        max = 30.0
    """)
    )
    ws = load_workspace(root)
    assert sorted(ws.kernels) == ["rmsnorm", "vector_add"]
    assert ws.serve_profiles == {"tiny": {"engine": "builtin"}}
    assert ws.acceptance["decode_latency"]["max"] == 30.0


def test_a_broken_spec_is_reported_and_does_not_hide_the_others(workspace: Path):
    broken = workspace / "broken"
    broken.mkdir()
    (broken / "spec.py").write_text("raise RuntimeError('half-written spec')\n")
    no_spec = workspace / "no_spec_attr"
    no_spec.mkdir()
    (no_spec / "spec.py").write_text("X = 1\n")
    bad_ref = workspace / "bad_ref"
    shutil.copytree(workspace / "vector_add", bad_ref)
    spec = (
        (bad_ref / "spec.py")
        .read_text()
        .replace('"reference.py:vector_add"', '"missing.py:vector_add"')
    )
    (bad_ref / "spec.py").write_text(spec.replace('name="vector_add"', 'name="bad_ref"'))

    ws = load_workspace(workspace)
    assert sorted(ws.kernels) == sorted(load_workspace().kernels)  # the good specs all loaded
    errors = {Path(folder).name: why for folder, why in ws.errors.items()}
    assert "half-written spec" in errors["broken"]
    assert "SPEC = KernelSpec" in errors["no_spec_attr"]
    assert "missing.py" in errors["bad_ref"]
    with pytest.raises(WorkspaceError, match="spec errors"):
        ws.kernel("bad_ref")


def test_invalid_toml_is_a_workspace_error(tmp_path):
    (tmp_path / "infra-agent.toml").write_text("[kernels\npaths = 3")
    with pytest.raises(WorkspaceError, match="invalid TOML"):
        load_workspace(tmp_path)


def test_workspace_file_accepts_only_existing_files_inside(tmp_path):
    ws = load_workspace(tmp_path)
    (tmp_path / "k.py").write_text("x = 1\n")
    assert ws.file("k.py") == (tmp_path / "k.py").resolve()
    assert ws.file(str(tmp_path / "k.py")) == (tmp_path / "k.py").resolve()
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        ws.file("../escape.py")
    with pytest.raises(WorkspaceError, match="no such file"):
        ws.file("missing.py")
