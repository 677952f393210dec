"""Code version and device facts recorded with each experiment."""

from __future__ import annotations

import subprocess

import pytest
from conftest import call

from infra_agent.tools.common import provenance

pytestmark = pytest.mark.anyio


def _git(root, *args):
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def git_workspace(workspace):
    _git(workspace, "init", "-q")
    _git(workspace, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(workspace, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "zoo")
    return workspace


async def test_commit_and_diff_hash_follow_the_code(git_workspace):
    from mcp import Client

    from infra_agent.server.app import build_server

    server = build_server(git_workspace)
    head = _git(git_workspace, "rev-parse", "HEAD")
    async with Client(server) as client:
        clean = await call(client, "list_kernels")
        ref = git_workspace / "rmsnorm" / "reference.py"
        ref.write_text(ref.read_text() + "\n# tweak\n")
        dirty = await call(client, "list_kernels")
        cmp = await call(
            client, "compare_experiments", a=clean["experiment_id"], b=dirty["experiment_id"]
        )
    await server.aclose()
    assert cmp["code"]["commit_a"] == cmp["code"]["commit_b"] == head
    assert cmp["code"]["diff_sha256_a"] != cmp["code"]["diff_sha256_b"]
    assert cmp["code"]["same_code"] is False
    assert "code differs" in cmp["summary"]


def test_device_fingerprint_ignores_hostname_only():
    facts = provenance.device_facts()
    assert facts["num_cpus"] >= 1 and facts["python"]
    renamed = {**facts, "hostname": "elsewhere"}
    upgraded = {**facts, "packages": {**facts["packages"], "torch": "9.9.9"}}
    assert provenance.fingerprint(renamed) == provenance.fingerprint(facts)
    assert provenance.fingerprint(upgraded) != provenance.fingerprint(facts)


def test_not_a_git_repository(tmp_path):
    assert provenance.git_state(tmp_path) == (None, None)
