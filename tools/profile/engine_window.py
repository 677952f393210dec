"""What profile(handle=) needs from each kind of engine: which processes to watch, and how its
profiling window comes back once /stop_profile has answered.

The adapter names its kind (`EngineAdapter.profile_kind`); this module has one reader per kind:

- ``window`` (the built-in engine): /stop_profile names a JSON file in the engine's folder holding
  the window in the profile job's own format (ranges, ops, threads), plus its torch trace.
- ``torch_traces`` (vLLM): the API server, the engine core and each worker write torch.profiler
  traces (``*.pt.trace.json.gz``) into the engine's ``profiles/``; ``torch_trace.py`` reads them
  into the same raw format (ops, record_function ranges per thread).

Everything the engine wrote is untrusted: paths must stay inside its folder, files are size-capped.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..base import AgentError
from . import torch_trace

MAX_PROFILE_BYTES = 64 << 20  # the engine's raw window (untrusted): a larger file is refused


@dataclass(frozen=True)
class EngineProcess:
    """One process of the engine, to watch from the host."""

    host_pid: int
    role: str  # names it in the thread table and findings: "engine", "api_server", "worker", ...


@dataclass(frozen=True)
class EngineWindow:
    """The window as the judge reads it, and the engine's own trace files (artifacts)."""

    raw: dict  # the profile job's raw format: window, ranges, ops, threads
    traces: dict[str, Path]  # the engine's own trace files, by artifact name


class WindowReader(Protocol):
    def processes(self, engine) -> list[EngineProcess]: ...

    def read(
        self, engine, stopped: dict, window: tuple[int, int], deadline: float
    ) -> EngineWindow: ...


def reader_for(engine) -> WindowReader:
    if engine.node is not None:  # py-spy, /proc and the traces are the engine's host's
        raise AgentError(
            f"profile(handle=) samples the engine's processes and reads its traces on the "
            f"server's host, and {engine.handle} runs on cluster node {engine.node}: launch_serve "
            "the same engine without resources= to profile it here, or profile a workload (a "
            "job, which runs on the cluster's nodes)"
        )
    kind = getattr(engine.adapter, "profile_kind", None)
    if kind not in READERS:
        raise AgentError(
            f"profile(handle=) cannot read the {engine.adapter.name} engine's profiling window "
            f"(it reads {', '.join(READERS)} kinds: the builtin and vllm engines). Profile a "
            "workload that runs one step of that stack instead, or launch_serve one of those"
        )
    return READERS[kind]


def cmdline_pids(engine, marks: dict[str, bytes]) -> list[EngineProcess]:
    """The engine's processes (its cgroup) whose command line holds one of `marks`, by role."""
    found = []
    for pid in sorted(engine.service.pids()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        role = next((r for r, mark in marks.items() if mark in cmdline), None)
        if role is not None:
            found.append(EngineProcess(pid, role))
    return found


def inside(engine, reported: object) -> Path | None:
    """A file the engine reported, as a host path inside the engine's own folder (else None)."""
    if not isinstance(reported, str) or not reported:
        return None
    rel = Path(reported)
    if rel.is_absolute():
        # the path as the engine sees its folder (/jobs/<name>/...) or, unsandboxed, the host path
        try:
            rel = (
                rel.relative_to(engine.folder)
                if rel.is_relative_to(engine.folder)
                else rel.relative_to(Path("/jobs") / engine.folder.name)
            )
        except ValueError:
            return None
    host = (engine.folder / rel).resolve()
    return host if host.is_relative_to(engine.folder.resolve()) and host.is_file() else None


class BuiltinWindow:
    """The built-in engine records the window itself (the profile job's recorder)."""

    def processes(self, engine) -> list[EngineProcess]:
        return cmdline_pids(engine, {"engine": b"infra_agent.serving.engine"})

    def read(self, engine, stopped: dict, window: tuple[int, int], deadline: float) -> EngineWindow:
        path = inside(engine, stopped.get("profile"))
        if path is None:
            raise AgentError(
                "the engine's /stop_profile named no profile file in its folder (is it the "
                "built-in engine, started with --profile-dir?)"
            )
        if path.stat().st_size > MAX_PROFILE_BYTES:
            raise AgentError(
                f"the engine's profile is {path.stat().st_size} bytes (cap {MAX_PROFILE_BYTES}): "
                "profile a shorter duration_s"
            )
        try:
            raw = json.loads(path.read_text())
        except ValueError:
            raise AgentError("the engine's profile file is not JSON") from None
        if (
            not isinstance(raw, dict)
            or not isinstance(raw.get("window"), dict)
            or not isinstance(raw.get("ranges"), dict)
        ):
            raise AgentError("the engine's profile file is malformed")
        with contextlib.suppress(
            OSError
        ):  # read into the judge: not kept twice in the engine's folder
            path.unlink()
        trace = inside(engine, stopped.get("trace"))
        return EngineWindow(raw, {"engine-torch-trace.json": trace} if trace else {})


# vLLM's processes: its API server runs the module; it starts the engine core, which starts the
# workers, each renaming itself (setproctitle) so its cmdline reads VLLM::EngineCore / VLLM::Worker
VLLM_PROCESSES = {
    "api_server": b"vllm.entrypoints.openai.api_server",
    "engine_core": b"VLLM::EngineCore",
    "worker": b"VLLM::Worker",
}
TRACES_DIR = "profiles"  # serving/adapters/vllm.py's torch_profiler_dir, in the engine's folder
TRACE_SETTLE_S = 0.5  # a trace file whose size held this long (and that reads whole) is complete
TRACE_WAIT_S = 30.0  # how long after /stop_profile the files may take to appear


class TorchTraces:
    """vLLM (--profiler-config torch): each process writes its own torch.profiler trace."""

    def processes(self, engine) -> list[EngineProcess]:
        return cmdline_pids(engine, VLLM_PROCESSES)

    def read(self, engine, stopped: dict, window: tuple[int, int], deadline: float) -> EngineWindow:
        folder = engine.folder / TRACES_DIR
        opened_s = time.time() - (time.monotonic_ns() - window[0]) / 1e9  # the window's start, Unix
        files = _settled_traces(folder, opened_s, min(deadline, time.monotonic() + TRACE_WAIT_S))
        if not files:
            raise AgentError(
                f"the engine wrote no torch trace into {TRACES_DIR}/ within {TRACE_WAIT_S:.0f} s "
                "of /stop_profile (was it started with --profiler-config, as launch_serve does?); "
                f"{engine.log_excerpt(1500)}"
            )
        traces = [torch_trace.read(p, MAX_PROFILE_BYTES) for p in files]
        return EngineWindow(
            torch_trace.window(traces, window), {f"engine-{p.name}": p for p in files}
        )


def _settled_traces(folder: Path, since_s: float, until: float) -> list[Path]:
    """Trace files written since the window opened, once none of them grows any more (each process
    writes its own, after /stop_profile has answered)."""
    seen: dict[Path, int] = {}
    while True:
        now = {
            p.resolve(): p.stat().st_size
            for p in (folder.glob("*.json*") if folder.is_dir() else [])
            if p.is_file() and p.stat().st_mtime >= since_s
        }
        now = {p: size for p, size in now.items() if p.is_relative_to(folder.resolve())}
        if now and now == seen and all(torch_trace.complete(p) for p in now):
            return sorted(now)
        if time.monotonic() > until:
            return sorted(p for p in now if torch_trace.complete(p))
        seen = now
        time.sleep(TRACE_SETTLE_S)


READERS: dict[str, WindowReader] = {"window": BuiltinWindow(), "torch_traces": TorchTraces()}
