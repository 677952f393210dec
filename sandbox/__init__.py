"""Isolated job runner (parent side) and the worker harness (child side, worker/).

    sb = Sandbox(workspace, state_dir)          # probes isolation; starts nothing yet
    sb.isolation.as_dict()                      # what is actually in force, and why not the rest
    res = await sb.run(Job(op="noop"), progress)  # a JobResult; agent failures are statuses
    sb.workspace_path(host_file)                # where a job sees a workspace file (read-only)
    svc = await sb.start_service(ServiceSpec(...))  # a long-running confined process (service.py)
    await sb.aclose()                           # kills the zygote and every job

    ex = RayExecutor(sb, "auto", node=NodeConfig(...))  # cluster.py: the same run(), on Ray's nodes
    res = await ex.run(Job(op="noop"))          # res.placement: the node and its device fingerprint
    actor = await ex.start_actor(Cls, resources)  # Cls(NodeConfig, WorkspaceVersion) on a node

Layers (each probed; a missing one is reported, never silently skipped): bwrap
namespaces around a warm zygote (policy.py, launcher.py, worker/zygote.py); per job,
in the forked child itself, Landlock + seccomp + rlimits (worker/confine.py,
worker/harness.py); per-job cgroups for memory, process count and a complete kill
(cgroups.py). runner.py queues jobs, spawn.py readies a job child, supervise.py watches
one; outcome.py turns what a job left into a status. cluster.py places jobs on the nodes of
a Ray cluster, where node.py runs each in that node's own Sandbox. Services (service.py) get the same
policy (policy.py builds both) around worker/engine_host.py. Without bwrap, `run` and
`start_service` refuse unless allow_unsandboxed=True.

The public API is what this module exports, and the modules in PUBLIC_MODULES; nothing
outside sandbox/ reaches further, by import or by attribute (tests/sandbox/test_api_boundary.py).
"""

from .cgroups import remove_stale_cgroups
from .isolation import Isolation
from .job import Job, JobKind, JobResult, JobStatus
from .owned import make_owned, pid_alive, sweep_dead_owners
from .policy import Limits
from .runner import Sandbox, SandboxError, free_port
from .service import CpuAccount, Service, owned_by_live_server
from .service_spec import Mount, ServiceSite, ServiceSpec
from .triton_cache import TRUSTED_ZOO

# Modules outside sandbox/ may import besides this one: the job types, the worker's wire format
# and stdlib helpers the judges share with it, and what the built-in engine (which runs
# inside a service) loads kernel specs and records its spans with.
PUBLIC_MODULES = (
    "job",
    "cluster",  # the Ray executor (imports ray only when one is made)
    "node",  # its node side: NodeHost, a Ray worker's sandbox (an engine's actor holds one)
    "worker.protocol",
    "worker.shared",
    "worker.tensors",
    "worker.layouts",  # the input layouts a check tries: the plan names them, the worker makes them
    "worker.loader",
    "worker.recorder",
    "worker.ranges",
)

__all__ = [
    "CpuAccount",
    "Isolation",
    "Job",
    "JobKind",
    "JobResult",
    "JobStatus",
    "Limits",
    "Mount",
    "Sandbox",
    "SandboxError",
    "Service",
    "ServiceSite",
    "ServiceSpec",
    "TRUSTED_ZOO",
    "free_port",
    "make_owned",
    "pid_alive",
    "owned_by_live_server",
    "remove_stale_cgroups",
    "sweep_dead_owners",
]
