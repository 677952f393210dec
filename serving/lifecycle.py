"""Start, watch and stop serving engines, each inside the sandbox.

    engines = Engines(sandbox)                       # one per server
    eng = await engines.launch(adapter, args)        # ready, or EngineError with the log tail
    eng.endpoint(...)                                # what the load generator talks to
    await engines.stop(eng.handle)                   # the whole process tree, always
    await engines.aclose()                           # every engine this server started

An engine is agent-influenced (a workspace engine fork, the workspace's kernels), so it
runs like every job: its own bubblewrap (the sandbox's policy: read-only Python install
and workspace, the model folder read-only at /model, its own writable folder, a network
namespace with only loopback), its own cgroup (memory, processes, a kill that reaches
everything), and inside it `ia_worker.engine_host` confines itself (Landlock, seccomp,
rlimits) before it starts the engine and relays a UNIX socket in the engine's folder to
the engine's port. bwrap's --die-with-parent ends the engine when the server dies, even
by SIGKILL; `aclose` (server exit, SIGTERM) stops them in order.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from . import engine_folders
from .adapters import EngineAdapter, EngineArgs
from .unix_http import UnixSocketTransport

READY_POLL_S = 0.25
MODEL_MOUNT = "/model"
PACKAGE_MOUNT = "/opt/ia/pkgs"  # infra_agent.serving and .kernels, for the built-in engine
_SOCKET = "engine.sock"
_UDS_MAX = 100  # sun_path holds 108 bytes; longer host paths go through a short symlink


class EngineError(Exception):
    """The engine could not be started or reached; the message says why and shows its log."""


@dataclass
class Engine:
    handle: str
    adapter: EngineAdapter
    args: EngineArgs
    folder: Path  # host path of the engine's own folder
    socket_path: str  # host path of the bridge socket (maybe a short symlink to it)
    port: int  # the engine's port inside its namespace
    proc: subprocess.Popen
    cgroup: object | None
    started_at: float = field(default_factory=time.time)
    ready_s: float | None = None
    stopped: bool = False  # stop() was called (maybe by another call, while it was still starting)
    disk: engine_folders.DiskCap | None = None
    final_log: str | None = None  # the log's end, kept when the folder is removed at stop

    @property
    def log_path(self) -> Path:
        return self.folder / "engine.log"

    def log_tail(self, num_bytes: int = 4000) -> str:
        if self.final_log is not None:
            return self.final_log[-num_bytes:]
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, self.log_path.stat().st_size - num_bytes))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        """Running, and its engine too (the host writes exit.json the moment the engine exits)."""
        return self.proc is not None and self.proc.poll() is None and not (self.folder / "exit.json").exists()

    def exit_code(self) -> int | None:
        """The engine's own return code (negative: a signal), as its host recorded it."""
        try:
            return json.loads((self.folder / "exit.json").read_text())["returncode"]
        except (OSError, ValueError, KeyError):
            return self.proc.returncode if self.proc is not None else None

    def death_cause(self) -> str:
        """Why it is not running, in words: the disk or memory limit, a signal, or its exit code."""
        if self.disk is not None and self.disk.exceeded:
            return self.disk.describe()
        if self.cgroup is not None and self.cgroup.oom_kills():
            return f"killed for exceeding its memory limit ({self.cgroup.peak_memory_bytes()} bytes peak)"
        code = self.exit_code()
        return f"exit code {code}" if code is None or code >= 0 else f"killed by signal {-code}"

    async def settled(self, timeout_s: float = 2.0) -> bool:
        """Whether it is still alive once a moment has passed (after failed requests: did it die?)."""
        deadline = time.monotonic() + timeout_s
        while self.alive and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.alive

    def client(self, timeout_s: float = 30.0) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url="http://engine", transport=UnixSocketTransport(self.socket_path),
                                 timeout=timeout_s)

    def describe(self) -> dict:
        alive = self.alive
        return {"handle": self.handle, "engine": self.adapter.name, "model": self.args.model,
                "alive": alive, "ready_s": self.ready_s, "started_at": self.started_at,
                "socket": self.socket_path, "log": str(self.log_path),
                "exit_cause": None if alive else f"{self.death_cause()}; its log ends:\n{self.log_tail(1500)}"}


@dataclass(frozen=True)
class StoppedEngine:
    engine: str  # its adapter
    model: str | None
    started_at: float  # Unix time, s
    stopped_at: float  # Unix time, s
    how: str  # "by stop_serve", "when its benchmark ended", ...


class Engines:
    def __init__(self, sandbox, *, memory_bytes: int | None = None):
        self.sandbox = sandbox
        self.memory_bytes = memory_bytes or sandbox.limits.memory_bytes
        self.disk_bytes = sandbox.limits.disk_bytes  # each engine's folder, as each job's
        self._engines: dict[str, Engine] = {}
        self.stopped: dict[str, StoppedEngine] = {}  # handle -> what it was: a second stop says so
        engine_folders.sweep_stale(sandbox.view.layout.jobs_dir)  # a previous server's engines died with it

    def get(self, handle: str) -> Engine:
        eng = self._engines.get(handle)
        if eng is None:
            raise self._unknown(handle)
        return eng

    def _unknown(self, handle: str) -> EngineError:
        known = ", ".join(self._engines) or "none running"
        if handle in self.stopped:
            gone = self.stopped[handle]
            ago = time.time() - gone.stopped_at
            return EngineError(f"the {gone.engine} engine {handle} was already stopped ({gone.how}, "
                               f"{ago:.0f} s ago; running: {known}); start another with "
                               "launch_serve")
        return EngineError(f"no serving engine with handle {handle!r} (running: {known}); start one with "
                           "launch_serve, or list them with list_serves")

    def list(self) -> list[Engine]:
        return list(self._engines.values())

    async def launch(self, adapter: EngineAdapter, args: EngineArgs, *, ready_timeout_s: float = 300.0,
                     progress=None) -> Engine:
        sb = self.sandbox
        if not sb.isolation.sandboxed and not sb.allow_unsandboxed:
            raise EngineError("refusing to start an engine without isolation (bubblewrap is missing); install "
                              "bubblewrap or start the server with --allow-unsandboxed")
        adapter.check(args)
        handle = f"serve-{uuid.uuid4().hex[:8]}"
        folder = sb.view.layout.jobs_dir / f"engine-{handle}"
        for sub in ("home", "tmp", "cache"):
            (folder / sub).mkdir(parents=True)
        engine_folders.claim(folder)
        port = 8000 if sb.isolation.sandboxed else free_port()  # a namespace of its own: any port is free
        eng = Engine(handle, adapter, args, folder, _short_socket_path(folder / _SOCKET), port, proc=None,
                     cgroup=None)
        self._engines[handle] = eng
        try:
            eng.cgroup, eng.proc = self._start(eng)
            eng.disk = engine_folders.DiskCap(folder, self.disk_bytes, sb.limits.max_files)
            eng.disk.start(lambda: asyncio.to_thread(_kill_tree, eng))  # dead, still listed, with the cause
            await self._wait_ready(eng, ready_timeout_s, progress)
        except BaseException as exc:
            if handle in self._engines:
                await self.stop(handle, how="after its failed start")
            elif isinstance(exc, EngineError):  # another call stopped it (its handle is in list_serves)
                raise EngineError(f"the {adapter.name} engine {handle} was stopped during launch (stop_serve); "
                                  "launch it again if it is still wanted") from None
            raise
        return eng

    def _start(self, eng: Engine):
        sb, view = self.sandbox, self.sandbox.view
        inside = view.job_dir(eng.folder.name)  # the folder as the engine sees it
        model = MODEL_MOUNT if (eng.args.model and view.sandboxed) else eng.args.model
        argv = eng.adapter.argv(eng.args, model=model, port=eng.port, python=view.layout.python)
        env = {**view.job_env(inside, sb.device, {}), "PYTHONPATH": f"{PACKAGE_MOUNT}:{view.worker_parent}"
               if view.sandboxed else os.pathsep.join([str(_package_root().parent), view.worker_parent]),
               "HF_HUB_OFFLINE": "1", "HF_HOME": f"{inside}/cache/hf", "PYTHONUNBUFFERED": "1",  # a live log
               **eng.adapter.env(eng.args)}
        rules = view.landlock_rules(inside)
        if eng.args.model:
            rules["read_only"].append(model)
        if view.sandboxed:
            rules["read_only"].append(PACKAGE_MOUNT)
        spec = {"folder": inside, "socket": _SOCKET, "port": eng.port, "argv": argv, "env": env,
                "landlock": rules if "landlock" in sb.isolation.layers else None,
                "seccomp": "seccomp" in sb.isolation.layers, "grace_s": 10,
                "file_bytes": sb.limits.file_bytes, "num_files": max(sb.limits.num_files, 65536)}
        (eng.folder / "engine.json").write_text(json.dumps(spec))
        host_cmd = [view.layout.python, "-m", "ia_worker.engine_host", f"{inside}/engine.json"]
        cgroup = None
        if sb.cgroups.available:
            cgroup = sb.cgroups.create(eng.folder.name, self.memory_bytes, sb.limits.num_processes)
        cmd = self._bwrap(eng) + ["--", *host_cmd] if view.sandboxed else host_cmd
        env_outer = None if view.sandboxed else {**view.zygote_env(), "PYTHONPATH": view.worker_parent}
        with open(eng.folder / "host.log", "ab") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=env_outer, start_new_session=True,
                                    preexec_fn=(lambda: cgroup.add(os.getpid())) if cgroup else None)
        return cgroup, proc

    def _bwrap(self, eng: Engine) -> list[str]:
        argv = self.sandbox.view.bwrap_argv()
        if eng.args.model:
            model = Path(eng.args.model).resolve()
            argv += ["--ro-bind", str(model), MODEL_MOUNT]
            state = Path(self.sandbox.state_dir).resolve()
            if state.is_relative_to(model):  # tools refuse such a folder; masked anyway, as jobs mask it
                rel = state.relative_to(model)
                hidden = f"{MODEL_MOUNT}/{rel}" if rel.parts else MODEL_MOUNT
                argv += ["--tmpfs", hidden, "--remount-ro", hidden]
        pkg = _package_root()
        # the built-in engine, the specs it loads and the worker loader it loads them with; never server/ or tools/
        for name in ("serving", "kernels", "sandbox"):
            argv += ["--ro-bind", str(pkg / name), f"{PACKAGE_MOUNT}/infra_agent/{name}"]
        return argv

    async def _wait_ready(self, eng: Engine, timeout_s: float, progress) -> None:
        t0 = time.monotonic()
        path = eng.adapter.health_path
        async with eng.client(timeout_s=5.0) as client:
            while True:
                if eng.stopped:
                    raise EngineError(f"the {eng.adapter.name} engine {eng.handle} was stopped during launch")
                if not eng.alive:
                    raise EngineError(f"the {eng.adapter.name} engine exited during start-up (code "
                                      f"{eng.exit_code()}); its log ends:\n{eng.log_tail()}")
                try:
                    resp = await client.get(path)
                    if resp.status_code == 200:
                        eng.ready_s = round(time.monotonic() - t0, 3)
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                waited = time.monotonic() - t0
                if waited > timeout_s:
                    raise EngineError(f"the {eng.adapter.name} engine did not answer {path} within {timeout_s:g} s "
                                      f"(raise ready_timeout_s for a large model); its log ends:\n{eng.log_tail()}")
                if progress is not None:
                    await progress(waited, timeout_s, f"waiting for {eng.adapter.name} to become ready")
                await asyncio.sleep(READY_POLL_S)

    async def stop(self, handle: str, how: str = "by stop_serve") -> str:
        """Stop an engine and everything it started; returns its log tail. `how`: why, for the
        record a later call on the handle is answered with."""
        eng = self._engines.pop(handle, None)
        if eng is None:
            raise self._unknown(handle)
        eng.stopped = True
        if eng.disk is not None:
            eng.disk.cancel()
        await asyncio.to_thread(self._stop_now, eng)
        self.stopped[handle] = StoppedEngine(eng.adapter.name, eng.args.model, eng.started_at,
                                             time.time(), how=how)
        eng.final_log = eng.log_tail(200_000)
        await asyncio.to_thread(shutil.rmtree, eng.folder, True)  # its caches and profiles: unbounded otherwise
        return eng.log_tail()

    @staticmethod
    def _stop_now(eng: Engine, grace_s: float = 15.0) -> None:
        """SIGTERM the engine host and the engine (not bwrap: its death SIGKILLs the namespace),
        wait for a clean exit, then end bwrap and kill whatever is left in the cgroup."""
        if eng.proc is not None and eng.proc.poll() is None:
            members = eng.cgroup.procs() if eng.cgroup is not None else set()
            inner = [pid for pid in members if _comm(pid) != "bwrap"]
            for pid in inner or [eng.proc.pid]:
                _signal(pid, signal.SIGTERM)
            try:
                eng.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                eng.proc.kill()
                eng.proc.wait(5)
        if eng.cgroup is not None:
            eng.cgroup.kill_all(timeout_s=5.0)
            eng.cgroup.remove(wait_s=1.0)
        link = Path(eng.socket_path)
        if link.is_symlink():
            link.unlink(missing_ok=True)
            link.parent.rmdir()

    async def aclose(self) -> None:
        for handle in list(self._engines):
            await self.stop(handle, how="when the server shut down")


def _kill_tree(eng: Engine) -> None:
    """Kill the engine and all it started (its folder outgrew the disk cap); stop() tidies up later."""
    if eng.cgroup is not None:
        eng.cgroup.kill_all(timeout_s=5.0)
    elif eng.proc is not None and eng.proc.poll() is None:
        os.killpg(eng.proc.pid, signal.SIGKILL)


def _package_root() -> Path:
    """The folder of the `infra_agent` package (this file is infra_agent/serving/lifecycle.py)."""
    return Path(__file__).resolve().parent.parent


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _short_socket_path(path: Path) -> str:
    if len(str(path)) <= _UDS_MAX:
        return str(path)
    link = Path(tempfile.mkdtemp(prefix="ia-eng-")) / "s"
    link.symlink_to(path)
    return str(link)
