"""Isolated job runner (parent side) and the worker harness (child side, worker/).

    sb = Sandbox(workspace, state_dir)          # probes isolation; starts nothing yet
    sb.isolation.as_dict()                      # what is actually in force
    result = await sb.run(Job(op="noop"))       # a JobResult; agent failures are statuses
    await sb.aclose()
"""

from .isolation import Isolation
from .job import Job, JobKind, JobResult, JobStatus
from .policy import Limits
from .runner import Sandbox, SandboxError

__all__ = ["Isolation", "Job", "JobKind", "JobResult", "JobStatus", "Limits", "Sandbox", "SandboxError"]
