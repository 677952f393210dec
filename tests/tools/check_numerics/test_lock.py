from conftest import copy_zoo

from infra_agent.kernels.workspace import load_workspace
from infra_agent.tools.check_numerics.lock import LOCK_NAME, check_lock, lock_kernel


def test_lock_then_unchanged_then_modified_reference(tmp_path):
    root = copy_zoo(tmp_path)
    ws = load_workspace(root)
    assert not check_lock(ws, "rmsnorm").locked
    entry = lock_kernel(ws, "rmsnorm")
    assert entry["tolerances"]["float32"]["rel_l2"] == 1e-5 and (root / LOCK_NAME).is_file()
    status = check_lock(ws, "rmsnorm")
    assert status.locked and status.ok
    ref = root / "rmsnorm" / "reference.py"
    ref.write_text(ref.read_text().replace("EPS = 1e-6", "EPS = 1e-2"))
    status = check_lock(load_workspace(root), "rmsnorm")
    assert not status.ok and any("reference source" in c for c in status.changes)


def test_a_loosened_tolerance_is_a_change(tmp_path):
    root = copy_zoo(tmp_path)
    lock_kernel(load_workspace(root), "vector_add")
    spec = root / "vector_add" / "spec.py"
    spec.write_text(spec.read_text().replace("rel_l2=1e-6", "rel_l2=1e-1"))
    changes = check_lock(load_workspace(root), "vector_add").changes
    assert any("tolerances" in c for c in changes) and any("spec file" in c for c in changes)
    assert check_lock(load_workspace(root), "rmsnorm").locked is False
