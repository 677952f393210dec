"""What crosses the trust boundary: a job going in, raw results coming out.

A job is JSON plus input files. Its result is whatever the worker wrote — raw
measurements, tensors, logs — and is never a verdict: the parent (``tools/``) judges.
Everything in a `JobResult` except `status` came from untrusted code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .errors import SandboxError

# Queue classes: "timing" jobs run one at a time per device so they do not disturb each
# other; "compile" and "run" jobs may run several at once.
JobKind = Literal["compile", "run", "timing"]

JobStatus = Literal[
    "ok",  # the op returned; `result` holds what it returned
    "error",  # the op raised; `error` holds the exception and the agent's frames
    "timeout",  # wall-clock limit reached; the job and everything it started were killed
    "crashed",  # died without a result (signal, segfault, os._exit before writing)
    "limit",  # a resource limit hit: output size, memory, processes, CPU time, file size
]


@dataclass
class Job:
    op: str  # a module under sandbox/worker/ops/, e.g. "noop", "numerics_run"
    payload: dict = field(default_factory=dict)  # JSON-serialisable arguments of the op
    kind: JobKind = "run"
    timeout_s: float = 60.0
    # host files copied into the job's in/ folder before it starts, by name
    inputs: dict[str, Path] = field(default_factory=dict)
    # extra environment for the job, e.g. {"TRITON_INTERPRET": "1"}
    env: dict[str, str] = field(default_factory=dict)
    # Triton cache group (sandbox/triton_cache.py): jobs naming the same group share compiled
    # kernels. One group per (call, code under test); never one for code of different trust.
    triton_cache: str | None = None
    # What a cluster node must have to run the job, in Ray resource names ({"GPU": 1},
    # {"accelerator_type:H200": 0.001}, a custom resource); empty: the executor's default for
    # the job's kind (sandbox/cluster.py). The local executor runs every job on this host.
    resources: dict[str, float] = field(default_factory=dict)
    # A cluster node's id (Placement.node_id): the job runs on that node or fails, never
    # elsewhere (a device's ceilings are measured on the node whose job asked for them). The
    # local executor runs every job on this host.
    node: str | None = None
    # The parent watches the job's processes from outside while it runs (profile's /proc and
    # py-spy samplers): it always runs on the server's own host, never on another node.
    host_bound: bool = False


def check_input_names(job: Job) -> None:
    """Each input lands in the job's in/ folder under its name: a plain file name, nothing else."""
    for name in job.inputs:
        if "/" in name or name in ("", ".", ".."):
            raise SandboxError(f"input name {name!r} must be a plain file name")


@dataclass(frozen=True)
class Placement:
    """Where a job ran when an executor placed it on a cluster node (None: the server's host)."""

    node_id: str  # the Ray node id (hex)
    address: str  # the node's IP address
    hostname: str
    device_fingerprint: str  # sha256 (16 hex) of the node's device facts (provenance.py)
    gpu_ids: tuple[str, ...] = ()  # the GPUs Ray gave the job (its CUDA_VISIBLE_DEVICES)


@dataclass
class JobResult:
    status: JobStatus
    result: dict = field(default_factory=dict)  # the op's return value (untrusted)
    out_dir: Path | None = None  # host path of the job's out/ folder (untrusted files)
    error: str | None = None  # what went wrong, in words an agent can act on
    stdout_tail: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0  # from start to exit, excluding time queued
    num_compiles: int = 0  # Triton cache entries (kernels, launchers) the job compiled itself
    queued_s: float = 0.0
    placement: Placement | None = None  # the cluster node it ran on; None: the server's own host

    @property
    def ok(self) -> bool:
        return self.status == "ok"
