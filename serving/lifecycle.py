"""Start, watch and stop serving engines, each a sandboxed service.

    engines = Engines(sandbox)                       # one per server
    eng = await engines.launch(adapter, args)        # ready, or EngineError with the log tail
    eng.client()                                     # httpx to its API (health, /metrics)
    await eng.run_load(ep, requests, arrivals)       # the load generator, where the engine runs
    await engines.expose(eng.handle, port=0)         # a TCP port on 127.0.0.1 for the user's clients
    await engines.stop(eng.handle)                   # the whole process tree, always
    await engines.aclose()                           # every engine this server started

An engine is agent-influenced (a workspace engine fork, the workspace's kernels), so it
runs as a service of the sandbox (`Sandbox.start_service`: the jobs' policy, its own
bubblewrap, cgroup and folder, confined before it starts). This module says what an
engine needs (`_service_spec`: its command line, the model folder read-only at /model,
our serving and kernel packages for the built-in engine), when it is ready (it answers
its adapter's health path), and keeps the bookkeeping `list_serves` and `stop_serve` read.
With a Ray cluster, `launch(..., resources=)` places an engine on a node that has them
(remote.py: the engine and its load generator both run there).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import anyio
import httpx

from ..sandbox import (
    CpuAccount,
    Mount,
    SandboxError,
    Service,
    ServiceSite,
    ServiceSpec,
    free_port,
)
from ..sandbox.job import Placement
from .adapters import EngineAdapter, EngineArgs
from .engine_log import first_error_line
from .expose import ExposedPort
from .interpreters import Interpreter
from .loadgen import Arrivals, BenchRequest, Endpoint, RunResult
from .loadgen.process import LoadProcess
from .remote import RemoteService
from .unix_http import UnixSocketTransport

__all__ = ["Engine", "EngineError", "Engines", "StoppedEngine", "free_port"]

READY_POLL_S = 0.25
# A failed start shows this much of the log's end: the cause is in its last lines (an argument
# parser's usage alone runs to several kB), and the agent's error message is capped at ~4 kB.
START_LOG_BYTES = 2000
MODEL_MOUNT = "/model"
PACKAGE_MOUNT = "/opt/ia/pkgs"  # infra_agent.serving and .kernels, for the built-in engine
# the built-in engine, the specs it loads and the worker loader it loads them with;
# never server/ or tools/
ENGINE_PACKAGES = ("serving", "kernels", "sandbox")


class EngineError(Exception):
    """The engine could not be started or reached; the message says why and shows its log."""


@dataclass
class Engine:
    handle: str
    adapter: EngineAdapter
    args: EngineArgs
    service: Service | RemoteService  # the sandboxed process tree, its folder and log
    started_at: float = field(default_factory=time.time)
    ready_s: float | None = None
    stopped: bool = False  # stop() was called (maybe by another call, while it was still starting)
    exposed: ExposedPort | None = None  # its TCP port on 127.0.0.1 (Engines.expose), closed at stop

    @property
    def node(self) -> str | None:
        """The cluster node it runs on, in words (address and node id); None: this host."""
        return self.service.node if isinstance(self.service, RemoteService) else None

    @property
    def placement(self) -> Placement | None:
        """Its cluster node with that node's device fingerprint; None: this host."""
        return self.service.placement if isinstance(self.service, RemoteService) else None

    @property
    def folder(self) -> Path:
        """Path of the engine's own folder (its log, caches, the profiles it records), on the
        host that runs it."""
        return self.service.folder

    @property
    def socket_path(self) -> str:
        """Host path of the UNIX socket relayed to the engine's port."""
        return self.service.socket_path

    @property
    def log_path(self) -> Path:
        return self.service.log_path

    def log_tail(self, num_bytes: int = 4000) -> str:
        return self.service.log_tail(num_bytes)

    def log_excerpt(self, num_bytes: int = 1500) -> str:
        """For an error message: the log's first error line (an exception's type and text, as
        Python prints it), when the tail does not hold it, then the tail. A dying vLLM ends
        its log with its shutdown and an EngineDeadError that says "see above"; the cause
        (e.g. `RuntimeError: Unsupported CPU attention configuration: head_dim=16`) lies
        ~100 lines higher."""
        tail = self.log_tail(num_bytes)
        service = self.service
        if isinstance(service, RemoteService):
            first = service.first_error()
        else:
            first = first_error_line(service.log_path)
        if first is None or first[1] in tail:
            return f"its log ends:\n{tail}"
        line_no, text = first
        return f"its first error (log line {line_no}): {text}\nits log ends:\n{tail}"

    @property
    def alive(self) -> bool:
        """Running, and its engine too (not only the sandbox around it)."""
        return self.service.alive

    def exit_code(self) -> int | None:
        """The engine's own return code (negative: a signal), as its host recorded it."""
        return self.service.exit_code()

    def death_cause(self) -> str:
        """Why it is not running, in words: the disk or memory limit, a signal, or its exit code."""
        return self.service.death_cause()

    async def cpu_account(self) -> CpuAccount | None:
        """The kernel's account of the engine's processes now (its node's, for one a cluster
        runs; None where it cannot be read), off this loop: a node's answer is a round trip."""
        return await asyncio.to_thread(self.service.cpu_account)

    async def settled(self, timeout_s: float = 2.0) -> bool:
        """Whether it is still alive once a moment has passed (after failed requests: did it
        die?)."""
        deadline = time.monotonic() + timeout_s
        while self.alive and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.alive

    def client(self, timeout_s: float = 30.0) -> httpx.AsyncClient:
        """httpx to the engine's API, for requests outside a timed run (health, /metrics): its
        bridge socket here, or relayed by its node."""
        service = self.service
        if isinstance(service, RemoteService):
            transport: httpx.AsyncBaseTransport = service.transport()
        else:
            transport = UnixSocketTransport(service.socket_path)
        return httpx.AsyncClient(base_url="http://engine", transport=transport, timeout=timeout_s)

    async def run_load(
        self, ep: Endpoint, requests: list[BenchRequest], arrivals: Arrivals, **options
    ) -> RunResult:
        """run_benchmark (its keyword arguments in `options`) where the engine runs, so that no
        network hop enters a latency: in a process of its own on this host (the server's loop
        only relays its progress), or on the engine's node."""
        async with self.load_generator() as run:
            return await run(ep, requests, arrivals, **options)

    @contextlib.asynccontextmanager
    async def load_generator(self) -> AsyncIterator[Callable[..., Awaitable[RunResult]]]:
        """run_load's generator made ready ahead of its one run (on this host, its process is
        started: 0.5-1 s), for a run that must begin the moment it is asked, inside a window
        that times it (profile's load). Yields `run(ep, requests, arrivals, **options)`."""
        if isinstance(self.service, RemoteService):
            yield self.service.run_load  # its node's actor is already up
            return
        async with await LoadProcess.start() as generator:
            yield generator.run

    def describe(self) -> dict:
        alive = self.alive
        return {
            "handle": self.handle,
            "engine": self.adapter.name,
            "model": self.args.model,
            "alive": alive,
            "ready_s": self.ready_s,
            "started_at": self.started_at,
            "node": self.node,
            "socket": self.socket_path,
            "url": self.exposed.url if self.exposed else None,
            "token_required": bool(self.exposed and self.exposed.token),
            "log": str(self.log_path),
            "exit_cause": None if alive else f"{self.death_cause()}; {self.log_excerpt(1500)}",
        }


@dataclass(frozen=True)
class StoppedEngine:
    engine: str  # its adapter
    model: str | None
    started_at: float  # Unix time, s
    stopped_at: float  # Unix time, s
    how: str  # "by stop_serve", "when its benchmark ended", ...


# How many stopped engines Engines.stopped remembers (the newest): a long session stops engines
# without end (every sweep_serve step launches one), and a second stop of an old handle only
# needs "no such engine"; the last few hundred are what an agent still holds.
STOPPED_KEPT = 256


class Engines:
    def __init__(
        self,
        sandbox,
        *,
        memory_bytes: int | None = None,
        pythons: dict[str, str] | None = None,
        cluster: Callable[[], Any] | None = None,
    ):
        self.sandbox = sandbox
        # the server's Ray executor (sandbox/cluster.py), joined on first use; None: no cluster
        self.cluster = cluster
        # engine -> its interpreter, from the server's command line (--engine-python): these win
        # over the workspace's [engines.<name>] python (serving/interpreters.py)
        self.pythons = dict(pythons or {})
        self.memory_bytes = memory_bytes or sandbox.limits.memory_bytes
        self.disk_bytes = sandbox.limits.disk_bytes  # each engine's folder, as each job's
        self._engines: dict[str, Engine] = {}
        # handle -> what it was, for the last STOPPED_KEPT stopped: a second stop says so
        self.stopped: dict[str, StoppedEngine] = {}
        sandbox.remove_stale_services()  # a previous server's engines died with it

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
            return EngineError(
                f"the {gone.engine} engine {handle} was already stopped ({gone.how}, "
                f"{ago:.0f} s ago; running: {known}); start another with "
                "launch_serve"
            )
        return EngineError(
            f"no serving engine with handle {handle!r} (running: {known}; of the stopped, only "
            f"the last {STOPPED_KEPT} are remembered); start one with launch_serve, or list "
            "them with list_serves"
        )

    def list(self) -> list[Engine]:
        return list(self._engines.values())

    async def launch(
        self,
        adapter: EngineAdapter,
        args: EngineArgs,
        *,
        interpreter: Interpreter | None = None,
        ready_timeout_s: float = 300.0,
        progress=None,
        resources: dict[str, float] | None = None,
    ) -> Engine:
        """Start an engine and wait until it answers its health path. `interpreter`: the Python
        of an engine with an install of its own (adapter.package); None: this server's.
        `resources`: on a node of the Ray cluster that has them (Ray resource names: GPU,
        accelerator_type:H200, ...); None: on this host."""
        sb = self.sandbox
        if not sb.isolation.sandboxed and not sb.allow_unsandboxed:
            raise EngineError(
                "refusing to start an engine without isolation (bubblewrap is missing); "
                "install bubblewrap or start the server with --allow-unsandboxed"
            )
        adapter.check(args)
        handle = f"serve-{uuid.uuid4().hex[:8]}"
        name = f"engine-{handle}"
        try:
            if resources is None:
                site = sb.service_site(name)
                service = await sb.start_service(
                    self._service_spec(adapter, args, site, interpreter)
                )
            else:
                service = await RemoteService.start(
                    self._executor(),
                    resources,
                    name,
                    lambda site: self._service_spec(adapter, args, site, interpreter),
                    place_timeout_s=ready_timeout_s,
                )
        except SandboxError as exc:
            raise EngineError(f"the {adapter.name} engine could not be started: {exc}") from None
        eng = Engine(handle, adapter, args, service)
        self._engines[handle] = eng
        try:
            await self._wait_ready(eng, ready_timeout_s, progress)
        except BaseException as exc:
            if handle in self._engines:
                # shielded: a cancelled launch (the client gave up) must still stop its engine;
                # under anyio every await in a cancelled scope would be cancelled again
                cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
                how = "when its launch was cancelled" if cancelled else "after its failed start"
                with anyio.CancelScope(shield=True):
                    await self.stop(handle, how=how)
            elif isinstance(
                exc, EngineError
            ):  # another call stopped it (its handle is in list_serves)
                raise EngineError(
                    f"the {adapter.name} engine {handle} was stopped during launch "
                    "(stop_serve); launch it again if it is still wanted"
                ) from None
            raise
        return eng

    def _executor(self) -> Any:
        if self.cluster is None:
            raise EngineError(
                "resources= places an engine on a node of a Ray cluster, and this server runs "
                "on none: start it with --cluster auto|HOST:PORT (or a [cluster] table in "
                "infra-agent.toml), or drop resources= to run the engine on this host"
            )
        return self.cluster()

    def _service_spec(
        self,
        adapter: EngineAdapter,
        args: EngineArgs,
        site: ServiceSite,
        interpreter: Interpreter | None,
    ) -> ServiceSpec:
        """What the engine runs and may see: its command line, the model folder read-only at
        /model, our engine packages read-only (never server/ or tools/), the folders of its
        own interpreter read-only at their own paths, and what its adapter asks for."""
        pkg = _package_root()
        mounts = [
            Mount(str(pkg / name), f"{PACKAGE_MOUNT}/infra_agent/{name}")
            for name in ENGINE_PACKAGES
        ]
        python = site.python
        if interpreter is not None:
            python = interpreter.python
            mounts += [Mount(folder, folder) for folder in interpreter.folders]
        mounts += [Mount(f, f) for f in adapter.host_folders if Path(f).is_dir()]
        model = None
        if args.model:
            mounts.insert(0, Mount(str(Path(args.model).resolve()), MODEL_MOUNT))
            model = MODEL_MOUNT if site.sandboxed else args.model
        return ServiceSpec(
            name=Path(site.folder).name,
            port=site.port,
            argv=tuple(adapter.argv(args, model=model, port=site.port, python=python)),
            python_path=(PACKAGE_MOUNT if site.sandboxed else str(pkg.parent),),
            env={
                "HF_HUB_OFFLINE": "1",
                "HF_HOME": f"{site.folder}/cache/hf",
                "PYTHONUNBUFFERED": "1",
                **adapter.env(args, memory_bytes=self.memory_bytes),
            },  # unbuffered: a live log
            mounts=tuple(mounts),
            shared_memory=adapter.shared_memory,
            own_ports=adapter.own_ports,
            memory_bytes=self.memory_bytes,
            disk_bytes=self.disk_bytes,
        )

    async def _wait_ready(self, eng: Engine, timeout_s: float, progress) -> None:
        t0 = time.monotonic()
        path = eng.adapter.health_path
        async with eng.client(timeout_s=5.0) as client:
            while True:
                if eng.stopped:
                    raise EngineError(
                        f"the {eng.adapter.name} engine {eng.handle} was stopped during launch"
                    )
                if not eng.alive:
                    raise EngineError(
                        f"the {eng.adapter.name} engine exited during start-up (code "
                        f"{eng.exit_code()}); {eng.log_excerpt(START_LOG_BYTES)}"
                    )
                try:
                    resp = await client.get(path)
                    if resp.status_code == 200:
                        eng.ready_s = round(time.monotonic() - t0, 3)
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                waited = time.monotonic() - t0
                if waited > timeout_s:
                    raise EngineError(
                        f"the {eng.adapter.name} engine did not answer {path} within "
                        f"{timeout_s:g} s ({_starved_words(eng, waited)}); "
                        f"{eng.log_excerpt(START_LOG_BYTES)}"
                    )
                if progress is not None:
                    await progress(
                        waited, timeout_s, f"waiting for {eng.adapter.name} to become ready"
                    )
                await asyncio.sleep(READY_POLL_S)

    async def expose(self, handle: str, port: int = 0, token: str | None = None) -> ExposedPort:
        """Open the engine to clients on this host: TCP on 127.0.0.1:`port` (0: a free one),
        relayed to its socket, `token` required as a bearer token when given; closed with the
        engine. A busy port or an engine on another node is an EngineError."""
        eng = self.get(handle)
        if isinstance(eng.service, RemoteService):
            raise EngineError(
                f"the engine {handle} runs on the cluster node {eng.node}: its socket is on that "
                "node, so this host cannot open a port to it; drop expose, or run the client "
                "there"
            )
        if eng.exposed is not None:
            raise EngineError(f"the engine {handle} is already open at {eng.exposed.url}")
        try:
            eng.exposed = await ExposedPort.open(eng.socket_path, port=port, token=token)
        except OSError as exc:
            raise EngineError(
                f"cannot listen on 127.0.0.1:{port} for the engine {handle}: {exc}; pick "
                "another port, or 0 for a free one"
            ) from None
        return eng.exposed

    async def stop(self, handle: str, how: str = "by stop_serve") -> str:
        """Stop an engine and everything it started; returns its log tail. `how`: why, for the
        record a later call on the handle is answered with."""
        eng = self._engines.pop(handle, None)
        if eng is None:
            raise self._unknown(handle)
        eng.stopped = True
        self.stopped[handle] = StoppedEngine(
            eng.adapter.name, eng.args.model, eng.started_at, time.time(), how=how
        )
        while len(self.stopped) > STOPPED_KEPT:  # the oldest first (dicts keep insertion order)
            del self.stopped[next(iter(self.stopped))]
        if eng.exposed is not None:  # the port first: no client reaches a stopping engine
            await eng.exposed.aclose()
        return await eng.service.stop()

    async def aclose(self) -> None:
        for handle in list(self._engines):
            await self.stop(handle, how="when the server shut down")


def _starved_words(eng: Engine, waited_s: float) -> str:
    """What to do about a start that ran out of time: the kernel's account of the engine's
    threads says whether the host's CPUs (it waited for one longer than it ran) or the model's
    size is the cause."""
    account = eng.service.cpu_account()
    if account is None:
        return "raise ready_timeout_s for a large model"
    where = f"its node {eng.node}" if eng.node else "this host"
    if account.starved(waited_s):
        return (
            f"{account.words()}: {where} starved it of CPU, whatever the model; free CPUs "
            "there (stop other engines or jobs) and launch it again, or raise ready_timeout_s"
        )
    return f"{account.words()}; raise ready_timeout_s for a large model"


def _package_root() -> Path:
    """The folder of the `infra_agent` package (this file is infra_agent/serving/lifecycle.py)."""
    return Path(__file__).resolve().parent.parent
