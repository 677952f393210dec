"""Isolated job runner (parent side) and the worker harness (child side, worker/).

    sb = Sandbox(workspace, state_dir)          # probes isolation; starts nothing yet
    sb.isolation.as_dict()                      # what is actually in force, and why not the rest
    res = await sb.run(Job(op="noop"), progress)  # a JobResult; agent failures are statuses
    sb.workspace_path(host_file)                # where a job sees a workspace file (read-only)
    await sb.aclose()                           # kills the zygote and every job

Layers (each probed; a missing one is reported, never silently skipped): bwrap
namespaces around a warm zygote (policy.py, launcher.py, worker/zygote.py); per job,
in the forked child itself, Landlock + seccomp + rlimits (worker/confine.py,
worker/harness.py); per-job cgroups for memory, process count and a complete kill
(cgroups.py). runner.py queues jobs, spawn.py readies a job child, supervise.py watches
one; outcome.py turns what a job left into a status. Without bwrap, `run` refuses unless allow_unsandboxed=True.
"""

from .isolation import Isolation
from .job import Job, JobKind, JobResult, JobStatus
from .policy import Limits
from .runner import Sandbox, SandboxError

__all__ = ["Isolation", "Job", "JobKind", "JobResult", "JobStatus", "Limits", "Sandbox", "SandboxError"]
