"""Code version and device facts recorded with each experiment."""

from __future__ import annotations

import subprocess

import pytest
from conftest import OTHER_DEVICE, call, record_on_node

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


async def test_work_on_a_cluster_node_is_compared_by_that_nodes_device(workspace):
    """A row's own device facts are the server's host's; work placed on a cluster node ran on
    that node's device (the ledger's `nodes`, as the executor records each placement). Two
    experiments on nodes of different hardware must not read "device same" because one server
    recorded both. The second node is written into the ledger as a cluster call records it:
    this host has one kind of device only (tests/server/test_cluster_calls.py checks that real
    nodes' fingerprints reach `nodes`)."""
    from mcp import Client

    from infra_agent.server.app import build_server

    server = build_server(workspace)
    async with Client(server) as client:
        a, b, c = [(await call(client, "list_kernels"))["experiment_id"] for _ in range(3)]
        host = provenance.fingerprint(provenance.device_facts())
        h200 = OTHER_DEVICE  # another node's device
        record_on_node(workspace, b, host)
        record_on_node(workspace, c, h200)
        same = await call(client, "compare_experiments", a=a, b=b)
        other = await call(client, "compare_experiments", a=a, b=c)
    await server.aclose()
    # a node with the host's device is the same device; the server's facts are equal throughout
    assert same["device"]["same_device"] is True, same["device"]
    assert same["device"]["fingerprints_b"] == [host] and "device same" in same["summary"]
    assert other["device"]["same_device"] is False, other["device"]
    assert other["device"]["fingerprints_a"] == [host]
    assert other["device"]["fingerprints_b"] == [h200]
    assert f"device differs (a ran on {host}, b on {h200})" in other["summary"], other["summary"]
