"""A Ray cluster of two nodes on 127.0.0.1 for the executor's tests (a helper module, like
stdio_server.py). Node A (the head) and node B stand in for two GPU types with custom
resources; both are real raylets with their own workers, object stores and PIDs.

Ray 2.60 would otherwise turn on token auth (writing ~/.ray/auth_token) and replace
127.0.0.1 with the host's primary address (FACTS.md): the environment below keeps every
address on loopback and every file under the test's own folder. It is set before Ray is
imported, since Ray reads it at import.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TYPE_A, TYPE_B = "accelerator_type:A100", "accelerator_type:H200"
SLOT = "slot"  # one on each node: a job asking for it runs wherever one is free
# health checks every 0.5 s, 3 misses: a killed node is dead to Ray within ~2 s (15 s default)
SYSTEM_CONFIG = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
    "health_check_initial_delay_ms": 0,
}


def loopback_ray_env(temp_dir: Path) -> None:
    (temp_dir / "ray").mkdir(parents=True, exist_ok=True)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # Ray's "use loopback" switch
    os.environ["RAY_TMPDIR"] = str(temp_dir)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"


@dataclass
class TwoNodes:
    cluster: Any  # ray.cluster_utils.Cluster
    node_b: Any  # its second node (a ray._private.node.Node)
    address: str
    id_a: str
    id_b: str
    temp_dir: Path

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def kill_b(self) -> None:
        """Kill node B's processes (raylet, object store, workers) without a goodbye."""
        self.cluster.remove_node(self.node_b, allow_graceful=False)


def start_two_nodes(num_cpus: int = 2) -> TwoNodes:
    """Both nodes, and this process joined to them as a driver. Ray's sockets live under a
    short folder of /tmp (AF_UNIX paths: 107 bytes), removed by `shutdown`."""
    temp_dir = Path(tempfile.mkdtemp(prefix="iaray-", dir="/tmp"))
    loopback_ray_env(temp_dir)
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        pytest.skip("ray is not installed (make setup installs it)")
    common = {"node_ip_address": "127.0.0.1", "num_cpus": num_cpus, "include_dashboard": False}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **common,
            "resources": {TYPE_A: 1, SLOT: 1},
            "temp_dir": str(temp_dir / "ray"),
            "_system_config": SYSTEM_CONFIG,
        },
    )
    node_b = cluster.add_node(**common, resources={TYPE_B: 1, SLOT: 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, include_dashboard=False)
    ids = {
        n["Resources"].get(TYPE_A) and "a" or "b": n["NodeID"] for n in ray.nodes() if n["Alive"]
    }
    return TwoNodes(cluster, node_b, cluster.address, ids["a"], ids["b"], temp_dir)
