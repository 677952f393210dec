"""Code snapshots kept per experiment: deduplicated blobs, a cap with a clear error, `infra-agent gc`
deleting only what no ledger row references; and the built-in zoo's state folder per checkout."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from conftest import ToolCallError, call
from typer.testing import CliRunner

from infra_agent.kernels.snapshots import MAX_SNAPSHOT_BYTES, BlobStore
from infra_agent.kernels.workspace import EMBEDDED_ROOT, embedded_state_dir, load_workspace
from infra_agent.server.cli import app

runner = CliRunner()


def _cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _age(store: BlobStore, sha: str, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(store.root / sha, (old, old))


def test_blobs_are_shared_and_gc_deletes_only_what_no_row_references(workspace: Path):
    assert _cli("call", "describe_kernel", "kernel=rmsnorm", "-w", str(workspace)).exit_code == 0
    store = BlobStore(workspace / ".infra-agent")
    kept_files = sorted(store.shas())
    kernel_files = sorted((workspace / "rmsnorm").glob("*.py"))
    # the kernel's folder, each file once, under the hash of its bytes (computed here independently)
    assert kept_files == sorted({_sha(f) for f in kernel_files})
    assert _cli("call", "describe_kernel", "kernel=rmsnorm", "-w", str(workspace)).exit_code == 0
    assert sorted(store.shas()) == kept_files  # a second experiment of the same code adds nothing

    orphan, fresh_orphan = (
        store.put(b"def gone(): pass\n"),
        store.put(b"def just_written(): pass\n"),
    )
    for sha in [*kept_files, orphan]:
        _age(store, sha, 3600)  # old enough for gc; fresh_orphan is inside the grace period
    (workspace / ".infra-agent" / "snapshots" / "e00009-abcd").mkdir(parents=True)

    result = _cli("gc", "-w", str(workspace))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["blobs_removed"] == 1 and report["bytes_freed"] == len(b"def gone(): pass\n")
    assert report["rebuilt_folders_removed"] == 1
    assert store.shas() == {*kept_files, fresh_orphan}
    assert not (workspace / ".infra-agent" / "snapshots" / "e00009-abcd").exists()


@pytest.mark.anyio
async def test_a_snapshot_over_the_cap_is_a_clear_error(client, workspace: Path):
    bulk = "x = 0\n" * (200_000 // 6)  # ~200 kB of generated source, many times over
    for i in range((MAX_SNAPSHOT_BYTES // 200_000) + 2):
        (workspace / "vector_add" / f"generated_{i}.py").write_text(bulk + f"# {i}\n")
    with pytest.raises(ToolCallError) as err:
        await call(client, "describe_kernel", kernel="vector_add")
    message = str(err.value)
    assert "over the snapshot cap" in message and "vector_add/generated_" in message
    assert "move unrelated or generated files out of the kernel's folder" in message
    await call(client, "describe_kernel", kernel="rmsnorm")  # other kernels are unaffected


def test_the_built_in_zoo_has_a_state_folder_per_checkout(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    clone_a, clone_b = tmp_path / "a" / "kernels", tmp_path / "b" / "kernels"
    for clone in (clone_a, clone_b):
        clone.mkdir(parents=True)
    (tmp_path / "link").symlink_to(clone_a)
    a, b = embedded_state_dir(clone_a), embedded_state_dir(clone_b)
    assert a != b and a.parent == b.parent == tmp_path / "state" / "infra-agent"
    assert embedded_state_dir(tmp_path / "link") == a  # keyed by the real path
    assert load_workspace(None).state_dir == embedded_state_dir(EMBEDDED_ROOT) not in (a, b)
    # a user's own workspace keeps its state inside itself, as before
    assert load_workspace(clone_a).state_dir == clone_a / ".infra-agent"
