"""device_info: the hardware and software that will run agent code, and how isolated it is.

The facts come from a device_probe job inside the sandbox (what the code will actually
see). When the sandbox cannot run, the answer says so plainly and falls back to what
the server process sees without importing torch.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from ..sandbox.job import Job
from ..sandbox.worker.protocol import OP_DEVICE_PROBE
from .base import Tool, ToolContext, ToolInput, ToolOutput
from .common import peaks, provenance


class Input(ToolInput):
    measure_peaks: bool = Field(
        default=False,
        description="Measure this device's ceilings now (copy bandwidth, matmul rate per dtype; a few "
        "seconds on a CPU) instead of only reporting the cached ones. microbench measures them on "
        "first use anyway; use this after a driver, clock or torch change.",
    )


class Device(BaseModel):
    index: int = Field(description="CUDA device index.")
    name: str = Field(description="Device name, e.g. 'NVIDIA H100 80GB HBM3'.")
    capability: str = Field(description="Compute capability 'major.minor' (e.g. '9.0' = sm_90).")
    total_memory_bytes: int = Field(description="Device memory in bytes.")
    multi_processor_count: int = Field(description="Number of SMs.")


class ClusterNode(BaseModel):
    node_id: str = Field(description="The Ray node id (hex).")
    address: str = Field(description="The node's IP address.")
    alive: bool = Field(description="False once Ray has marked the node dead.")
    resources: dict[str, float] = Field(
        description="What the node has, in Ray's resource names: CPU (cores), GPU (devices), "
        "memory (bytes), accelerator_type:<name>, custom resources."
    )
    free: dict[str, float] = Field(
        description="What is free on it now (same units); a job waits for its resources here."
    )


class ToolNotLoaded(BaseModel):
    module: str = Field(
        description="The tool module of this install that failed to import, e.g. 'sweep_kernel'."
    )
    error: str = Field(description="Its import error: exception type and message.")


class Output(ToolOutput):
    sandbox_available: bool = Field(description="True when the probe ran inside the sandbox.")
    isolation_level: str = Field(
        description="Isolation actually in force for agent code (from the sandbox), or 'unavailable'."
    )
    isolation: dict[str, Any] = Field(
        default_factory=dict,
        description="The sandbox's own account of its isolation: what is on, what is missing.",
    )
    sandbox_error: str | None = Field(
        default=None, description="Why the sandbox could not run the probe, if so."
    )
    device: str = Field(
        description="'cuda' when a GPU is visible to workers, else 'cpu' (Triton runs interpreted)."
    )
    devices: list[Device] = Field(
        default_factory=list, description="CUDA devices visible to workers."
    )
    cpu_model: str = Field(description="CPU model name.")
    num_cpus: int | None = Field(description="Logical CPUs on the host.")
    num_cpus_usable: int | None = Field(
        default=None, description="CPUs the worker may run on (affinity)."
    )
    versions: dict[str, str | None] = Field(
        description="python, torch, triton, numpy (and CUDA/HIP runtime) versions the workers use."
    )
    worker_facts: dict[str, Any] = Field(
        default_factory=dict,
        description="Every raw fact the probe returned, for anything not summarised above.",
    )
    server_view: dict[str, Any] = Field(
        description="What the server process itself sees (package metadata, /proc), without importing torch."
    )
    peaks: dict[str, Any] | None = Field(
        default=None,
        description="Measured ceilings of this device, as microbench's roofline uses them: copy_gbps "
        "(GB/s), cache_copy_gbps (GB/s, CPU), matmul_tflops per dtype (TFLOP/s), method, measured_at "
        "(Unix s); null when not measured yet (pass measure_peaks=true, or run microbench once).",
    )
    peaks_note: str = Field(
        default="",
        description="Where the ceilings came from: measured now, cached (when), or why none.",
    )
    cluster: list[ClusterNode] = Field(
        default_factory=list,
        description="With `serve --cluster`: every node of the Ray cluster jobs run on, with its "
        "devices and free slots (the facts above are of the node the probe job ran on); empty when "
        "jobs run on this host only.",
    )
    tools_not_loaded: list[ToolNotLoaded] = Field(
        default_factory=list,
        description="Tool modules of this server's install that failed to import, so the server "
        "serves without them (tools/list lacks them), each with its error; empty when every tool "
        "loaded. Fix the install (reinstall the package, or the dependency the error names).",
    )


async def run(inp: Input, ctx: ToolContext) -> Output:
    server_view = provenance.device_facts()
    facts: dict[str, Any] = {}
    isolation: dict[str, Any] = {}
    level, error = "unavailable", None
    node = None  # the cluster node the probe ran on: its ceilings are measured there too
    try:
        sandbox = ctx.sandbox
        level = str(sandbox.isolation.level)
        isolation = dict(sandbox.isolation.as_dict())
        await ctx.progress(0, 1, "probing the worker environment")
        result = await sandbox.run(Job(op=OP_DEVICE_PROBE, kind="run", timeout_s=120.0))
        if result.ok:
            facts = dict(result.result)
            node = result.placement.node_id if result.placement is not None else None
        else:
            error = f"device_probe job {result.status}: {result.error or result.stderr_tail[-500:]}"
    except Exception as exc:  # the sandbox missing or failing is an answer here, not an error
        error = f"{type(exc).__name__}: {exc}"
    await ctx.progress(1, 1, "done")
    cluster = [ClusterNode(**n) for n in ctx.cluster_nodes()]
    on_cluster = _cluster_words(cluster)
    not_loaded = [ToolNotLoaded(module=m, error=e) for m, e in ctx.tools_not_loaded().items()]
    missing = (
        f"; {len(not_loaded)} tool(s) failed to load: {', '.join(t.module for t in not_loaded)}"
        if not_loaded
        else ""
    )

    if facts:
        measured, peaks_note = await _peaks(inp, ctx, facts.get("peaks_fingerprint"), node)
        devices = [Device(**d) for d in facts.get("devices", [])]
        versions = {
            k: facts.get(k)
            for k in ("python", "torch", "triton", "numpy", "torch_cuda", "torch_hip")
        }
        out = Output(
            sandbox_available=True,
            isolation_level=level,
            isolation=isolation,
            sandbox_error=None,
            device="cuda" if devices else "cpu",
            devices=devices,
            cpu_model=facts.get("cpu_model", "?"),
            num_cpus=facts.get("num_cpus"),
            num_cpus_usable=facts.get("num_cpus_usable"),
            versions=versions,
            worker_facts=facts,
            server_view=server_view,
            peaks=measured,
            peaks_note=peaks_note,
            cluster=cluster,
            tools_not_loaded=not_loaded,
        )
        where = (
            ", ".join(f"{d.name} (sm_{d.capability.replace('.', '')})" for d in devices)
            or f"CPU only ({out.cpu_model}, {out.num_cpus_usable} usable cores; Triton runs interpreted)"
        )
        ceilings = f"; ceilings {measured['copy_gbps']:.1f} GB/s copy" if measured else ""
        out.summary = (
            f"{where}; torch {versions['torch']}, triton {versions['triton']}; isolation: {level}"
            f"{ceilings}{on_cluster}{missing}"
        )
        return out

    versions = {"python": server_view["python"], **server_view["packages"]}
    gpus = server_view["gpus"]
    return Output(
        sandbox_available=False,
        isolation_level=level,
        isolation=isolation,
        sandbox_error=error,
        device="cuda" if gpus else "cpu",
        cpu_model=server_view["cpu_model"],
        num_cpus=server_view["num_cpus"],
        versions=versions,
        server_view=server_view,
        cluster=cluster,
        tools_not_loaded=not_loaded,
        summary=f"sandbox unavailable ({error}); agent code cannot run. The server sees "
        f"{', '.join(gpus) or 'no NVIDIA GPU'}, {server_view['cpu_model']} x{server_view['num_cpus']}, "
        f"torch {versions.get('torch')} (from package metadata){on_cluster}{missing}",
    )


def _cluster_words(nodes: list[ClusterNode]) -> str:
    if not nodes:
        return ""
    alive = [n for n in nodes if n.alive]
    kinds = sorted(
        {
            k.split(":", 1)[1]
            for n in alive
            for k in n.resources
            if k.startswith("accelerator_type:")
        }
    )
    free = sum(n.free.get("CPU", 0.0) for n in alive)
    gpus = sum(n.resources.get("GPU", 0.0) for n in alive)
    return (
        f"; cluster: {len(alive)} of {len(nodes)} nodes alive, {gpus:g} GPUs"
        f"{' (' + ', '.join(kinds) + ')' if kinds else ''}, {free:g} CPUs free"
    )


async def _peaks(
    inp: Input, ctx: ToolContext, fingerprint: dict | None, node: str | None
) -> tuple[dict | None, str]:
    if inp.measure_peaks:
        return await peaks.device_peaks(ctx, fingerprint, node=node, refresh=True)
    cached = peaks.load_cached(ctx.workspace.state_dir, fingerprint) if fingerprint else None
    if cached is None:
        return (
            None,
            "not measured yet on this device: pass measure_peaks=true, or run microbench once",
        )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(cached.get("measured_at", 0)))
    return cached, f"{cached.get('source', 'measured')} {when}, cached"


TOOL = Tool(
    name="device_info",
    title="Device and isolation info",
    description="What hardware and software will run agent code: GPUs (name, compute capability, memory) or "
    "CPU, torch/triton/numpy/python versions as the sandboxed worker sees them, and the isolation level "
    "actually in force (and what is missing), and the device's measured ceilings (GB/s, TFLOP/s) when "
    "known. Says plainly when the sandbox is unavailable, and names any tool of this install that failed "
    "to load (tools_not_loaded).",
    input_model=Input,
    output_model=Output,
    run=run,
    idempotent=True,
)
