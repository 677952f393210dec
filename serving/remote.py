"""Engines on the nodes of a Ray cluster: the engine and its load generator on one node.

    service = await RemoteService.start(executor, resources, name, spec_for)
    service.transport()                       # httpx: plain requests, made on the engine's node
    await service.run_load(ep, requests, arrivals, progress=...)  # run_benchmark on that node

`launch_serve` with resources= places an engine here instead of on the server's host. One Ray
actor (`EngineNode`) per engine lives on the node Ray chose for those resources (it holds them
while the engine runs) and owns it there:

1. It starts the engine in its node's sandbox (`sandbox.node.NodeHost`: the same bubblewrap,
   Landlock, seccomp and cgroups as a job there; a node without a complete sandbox refuses),
   from the `ServiceSpec` the server built (`Engines._service_spec`: plain data), its mounts
   under the server's workspace moved to the node's synced copy of it.
2. It runs the load generator (`run_benchmark`) on that node, on the engine's own UNIX socket,
   so no network hop enters a latency; its progress lines stream back as they come, then its
   records. The judge (the metrics, the criteria, the findings) stays on the server.
3. The server's other requests (health, /v1/models, /metrics) are relayed: `transport()` is an
   httpx transport whose requests the actor makes on its node, outside any timed window.

The node's death ends the actor (Ray never restarts it): the engine is then lost, and every
call on it (list_serves' `alive`, stop_serve) says so, naming the node.

`RemoteService` is what `Engine.service` holds for such an engine: the surface of
`sandbox.Service` that Engine reads (alive, exit_code, death_cause, log_tail, stop), with paths
that are the node's. Every node runs this same package (the server ships only data: the spec,
the requests), and an engine with an install of its own (vLLM) must be at the same path there.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import httpx

from ..sandbox import CpuAccount, Mount, SandboxError, ServiceSite, ServiceSpec
from ..sandbox.cluster import first_line, relay, resource_words
from ..sandbox.job import Placement
from ..sandbox.node import NodeProgress
from .engine_log import first_error_line
from .loadgen import Arrivals, BenchRequest, Endpoint, RunResult, no_gc_pauses, run_benchmark
from .unix_http import UnixSocketTransport

# Engine's readers (alive, the log) are synchronous, so a call to the node blocks the server's
# loop: at most this long, and a node that did not answer is not asked again for QUIET_S (Ray
# notices a dead node only after its health checks: ~15 s by default)
STATE_TIMEOUT_S = 5.0
QUIET_S = 30.0
STOP_TIMEOUT_S = 60.0
_BODY_FRAMING = {"content-encoding", "content-length", "transfer-encoding"}


@dataclass(frozen=True)
class HttpReply:
    """One relayed request's answer, or the transport error the node saw."""

    status: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    content: bytes = b""
    error: str | None = None  # the httpx error on the node ("ConnectError: ..."); None: answered


@dataclass(frozen=True)
class EngineState:
    alive: bool
    exit_code: int | None
    death_cause: str  # in words (Service.death_cause); "" while alive


class EngineNode:
    """The Ray actor, on its node: that node's sandbox with one engine in it, and the load
    generator that measures it (an async actor: requests and a load run share its loop)."""

    def __init__(self, config: Any, workspace: Any, server_workspace: str):
        from ..sandbox.node import NodeHost  # a Ray worker's sandbox and workspace copy

        self.host = NodeHost(config)
        self.workspace = workspace  # the WorkspaceVersion the engine starts on
        self.server_workspace = Path(server_workspace)
        self.service: Any = None  # sandbox.Service, once started

    async def placement(self) -> Placement:
        import ray

        gpu_ids = tuple(str(g) for g in ray.get_gpu_ids())
        return replace(self.host.placement, gpu_ids=gpu_ids)

    async def site(self, name: str) -> ServiceSite:
        return self.host.sandbox.service_site(name)

    async def start(self, spec: ServiceSpec) -> tuple[str, str, str]:
        """Start the engine; returns its socket's path, its folder and its log, on this node."""
        await asyncio.to_thread(self.host.prepare, self.workspace)
        spec = replace(spec, mounts=tuple(self._on_this_node(m) for m in spec.mounts))
        gpu_ids = (await self.placement()).gpu_ids
        if gpu_ids:
            spec = replace(spec, env={**spec.env, "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids)})
        self.service = await self._on_host_loop(self.host.sandbox.start_service(spec))
        return self.service.socket_path, str(self.service.folder), str(self.service.log_path)

    def _on_this_node(self, mount: Mount) -> Mount:
        """A mount of the server's workspace (a model folder in it) moved to this node's copy."""
        source = Path(mount.source)
        if source.is_relative_to(self.server_workspace):
            rel = source.relative_to(self.server_workspace)
            return replace(mount, source=str(self.host.workspace / rel))
        return mount

    async def request(
        self, method: str, path: str, headers: list, body: bytes, timeout_s: float
    ) -> HttpReply:
        transport = UnixSocketTransport(self.service.socket_path)
        async with httpx.AsyncClient(
            base_url="http://engine", transport=transport, timeout=timeout_s
        ) as client:
            try:
                resp = await client.request(method, path, headers=headers, content=body)
            except httpx.HTTPError as exc:
                return HttpReply(error=f"{type(exc).__name__}: {exc}")
            headers = tuple(  # the body goes back whole and decoded
                (k, v) for k, v in resp.headers.multi_items() if k.lower() not in _BODY_FRAMING
            )
            return HttpReply(resp.status_code, headers, resp.content)

    async def state(self) -> EngineState:
        svc = self.service
        alive = svc.alive
        return EngineState(alive, svc.exit_code(), "" if alive else svc.death_cause())

    async def log_tail(self, num_bytes: int) -> str:
        return self.service.log_tail(num_bytes)

    async def first_error(self) -> tuple[int, str] | None:
        return first_error_line(self.service.log_path)

    async def cpu_account(self) -> CpuAccount | None:
        return self.service.cpu_account()

    async def run_load(
        self, ep: Endpoint, requests: list[BenchRequest], arrivals: Arrivals, options: dict
    ) -> AsyncIterator[NodeProgress | RunResult]:
        """run_benchmark here: its progress lines as they come, then its result, last."""
        lines: asyncio.Queue[NodeProgress] = asyncio.Queue()

        async def progress(done: float, total: float | None, message: str) -> None:
            lines.put_nowait(NodeProgress(done, total, message))

        with no_gc_pauses():
            run = asyncio.ensure_future(
                run_benchmark(ep, requests, arrivals, progress=progress, **options)
            )
            try:
                while not run.done() or not lines.empty():
                    getter = asyncio.ensure_future(lines.get())
                    await asyncio.wait({run, getter}, return_when=asyncio.FIRST_COMPLETED)
                    if getter.done():
                        yield getter.result()
                    else:
                        getter.cancel()
            finally:  # the server cancelled, or dropped the stream: the requests end too
                run.cancel()
        yield run.result()

    async def stop(self) -> str:
        """Stop the engine and everything it started; returns its log's end."""
        tail = await self._on_host_loop(self.service.stop()) if self.service else ""
        await asyncio.to_thread(self.host.close)
        return tail

    async def _on_host_loop(self, coro) -> Any:
        """The sandbox's coroutines run on its own loop (its zygote and services belong to it)."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.host.loop))


class RemoteService:
    """An engine on a cluster node as Engine reads it (sandbox.Service's surface)."""

    def __init__(
        self, actor: Any, placement: Placement, socket_path: str, folder: str, log_path: str
    ):
        import ray

        self._ray = ray
        self.actor = actor
        self.placement = placement
        self.socket_path = socket_path  # on the node
        self.folder = Path(folder)  # on the node
        self.log_path = Path(log_path)  # on the node
        self.started_at = time.time()
        self.lost: str | None = None  # why the node can no longer be reached (its death)
        self._quiet_until = 0.0  # monotonic time before which the node is not asked
        self.final_log: str | None = None

    @classmethod
    async def start(
        cls,
        executor: Any,
        resources: dict[str, float],
        name: str,
        spec_for: Callable[[ServiceSite], ServiceSpec],
        *,
        place_timeout_s: float,
    ) -> RemoteService:
        """An actor on a node with `resources`, the engine started in its sandbox (not yet
        ready: the caller waits for its health path). SandboxError says why not."""
        import ray

        actor = await executor.start_actor(EngineNode, resources, str(executor.local.workspace))
        try:
            try:
                placement = await asyncio.wait_for(actor.placement.remote(), place_timeout_s)
            except asyncio.TimeoutError:
                raise SandboxError(
                    f"no node of the cluster had {resource_words(resources)} free within "
                    f"{place_timeout_s:g} s (engines and jobs hold theirs while they run); stop "
                    "an engine, or ask for less"
                ) from None
            site = await actor.site.remote(name)
            started = await actor.start.remote(spec_for(site))
        except BaseException as exc:
            ray.kill(actor)
            if isinstance(exc, ray.exceptions.RayTaskError):
                cause = exc.cause if isinstance(exc.cause, Exception) else exc
                raise SandboxError(str(cause)) from None
            if isinstance(exc, ray.exceptions.RayError):
                raise SandboxError(
                    f"its node failed while it started ({first_line(exc)})"
                ) from None
            raise
        return cls(actor, placement, *started)

    @property
    def node(self) -> str:
        """The node in words: its address and Ray node id."""
        return f"{self.placement.address} ({self.placement.node_id[:12]})"

    # --- what Engine reads (each a call to the node) ---------------------------------------------

    def _call(self, method: str, *args: Any) -> Any:
        """A method of the actor, waited for here (Engine's readers are synchronous); None once
        the node is lost, with `lost` saying why."""
        if self.lost is not None or time.monotonic() < self._quiet_until:
            return None
        try:
            return self._ray.get(getattr(self.actor, method).remote(*args), timeout=STATE_TIMEOUT_S)
        except self._ray.exceptions.GetTimeoutError:
            self._quiet_until = time.monotonic() + QUIET_S  # not lost for good: asked again later
            return None
        except self._ray.exceptions.RayActorError as exc:
            self.lost = f"its node {self.node} is lost ({first_line(exc)})"
            return None

    def state(self) -> EngineState:
        state = self._call("state")
        if state is None:
            why = self.lost or (
                f"its node {self.node} did not answer within {STATE_TIMEOUT_S:g} s (asked again "
                f"after {QUIET_S:g} s; device_info says whether the node is alive)"
            )
            return EngineState(False, None, why)
        return state

    @property
    def alive(self) -> bool:
        return self.state().alive

    def exit_code(self) -> int | None:
        return self.state().exit_code

    def death_cause(self) -> str:
        return self.state().death_cause

    def log_tail(self, num_bytes: int = 4000) -> str:
        if self.final_log is not None:
            return self.final_log[-num_bytes:]
        return self._call("log_tail", num_bytes) or ""

    def first_error(self) -> tuple[int, str] | None:
        return self._call("first_error")

    def pids(self) -> set[int]:
        return set()  # pids of another host mean nothing here

    def cpu_account(self) -> CpuAccount | None:
        """Its node's kernel's account (None once the node is lost or silent)."""
        return self._call("cpu_account")

    async def stop(self) -> str:
        """Stop the engine on its node and end the actor (its resources return to the node)."""
        try:
            if self.lost is None:
                self.final_log = await asyncio.wait_for(self.actor.stop.remote(), STOP_TIMEOUT_S)
        except (asyncio.TimeoutError, self._ray.exceptions.RayError) as exc:
            self.lost = self.lost or f"its node {self.node} did not stop it ({first_line(exc)})"
        finally:
            self._ray.kill(self.actor)
        return self.log_tail() if self.final_log is not None else (self.lost or "")

    # --- the two ways the server reaches the engine --------------------------------------------

    def transport(self) -> httpx.AsyncBaseTransport:
        return _RelayTransport(self)

    async def run_load(
        self,
        ep: Endpoint,
        requests: list[BenchRequest],
        arrivals: Arrivals,
        *,
        progress: Callable | None = None,
        **options: Any,
    ) -> RunResult:
        """run_benchmark on the engine's node; `options` are its keyword arguments."""
        stream = self.actor.run_load.options(num_returns="streaming").remote(
            ep, requests, arrivals, options
        )
        try:
            return await relay(stream, progress)
        except asyncio.CancelledError:
            self._ray.cancel(stream)
            raise
        except self._ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, Exception) else exc
            raise cause from None  # the load generator's own error (ValueError, ...)
        except self._ray.exceptions.RayError as exc:
            raise SandboxError(
                f"the load generator on node {self.node} failed ({first_line(exc)})"
            ) from None


class _RelayTransport(httpx.AsyncBaseTransport):
    """httpx requests made by the engine's actor on its node (whole bodies, not streamed)."""

    def __init__(self, service: RemoteService):
        self.service = service

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        svc = self.service
        timeout = request.extensions.get("timeout", {}).get("read") or 30.0
        body = await request.aread()
        headers = [(k.decode(), v.decode()) for k, v in request.headers.raw]
        try:
            reply: HttpReply = await svc.actor.request.remote(
                request.method, request.url.raw_path.decode(), headers, body, timeout
            )
        except svc._ray.exceptions.RayError as exc:
            raise httpx.ConnectError(
                f"the engine's node {svc.node} did not relay the request ({first_line(exc)})",
                request=request,
            ) from None
        if reply.error is not None:
            raise httpx.ConnectError(reply.error, request=request)
        return httpx.Response(
            reply.status, headers=list(reply.headers), content=reply.content, request=request
        )
