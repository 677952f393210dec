"""The parent's handle on one zygote process (see worker/zygote.py for the other side).

Starts it (under bwrap when the view is sandboxed) with one end of a SOCK_SEQPACKET
socket pair, waits for its "ready", forwards spawn/kill requests, and turns its "exited"
reports into futures. When the zygote dies every job still waiting on it is told so;
the runner then starts a fresh one for the jobs that come next.

Started with ``subprocess.Popen`` (no ``preexec_fn``: the server is threaded), in a new
session; ``--die-with-parent`` (bwrap) and ``PR_SET_PDEATHSIG`` (zygote) make it die
with the server even on SIGKILL.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

from .policy import SandboxView


class ZygoteDied(Exception):
    pass


class Zygote:
    def __init__(self, proc: subprocess.Popen, ctl: socket.socket, log_path: Path):
        self.proc = proc
        self.ctl = ctl
        self.log_path = log_path
        self.ready: dict = {}
        self.dead = False
        self._exits: dict[str, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None

    @classmethod
    async def start(cls, view: SandboxView, log_path: Path, timeout_s: float = 120.0) -> "Zygote":
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = view.zygote_argv(child_end.fileno())
        if view.sandboxed:
            argv[0] = shutil.which("bwrap") or argv[0]
        env = None if view.sandboxed else view.zygote_env()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                pass_fds=[child_end.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        child_end.close()
        parent_end.setblocking(False)
        zygote = cls(proc, parent_end, log_path)
        loop = asyncio.get_running_loop()
        try:
            data = await asyncio.wait_for(loop.sock_recv(parent_end, 65536), timeout_s)
            why = "it closed its socket before saying it was ready"
        except asyncio.TimeoutError:
            data, why = b"", f"no ready message within {timeout_s:g} s"
        if not data:
            code = proc.poll()
            zygote.terminate()
            how = (
                "still running"
                if code is None
                else (f"exit code {code}" if code >= 0 else f"killed by signal {-code}")
            )
            raise ZygoteDied(
                f"the sandbox worker did not start ({why}; {how}); its log ends with:\n"
                f"{zygote.log_tail()}"
            )
        zygote.ready = json.loads(data)
        zygote._reader = asyncio.create_task(zygote._read_loop())
        return zygote

    @property
    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def log_tail(self, num_bytes: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-num_bytes:].decode(errors="replace")
        except OSError:
            return ""

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await loop.sock_recv(self.ctl, 65536)
                if not data:
                    break
                msg = json.loads(data)
                future = self._exits.pop(msg.get("exited"), None)
                if future is not None and not future.done():
                    future.set_result(msg)
        except (OSError, ValueError):
            pass
        finally:
            self._die()

    def _die(self) -> None:
        self.dead = True
        for future in self._exits.values():
            if not future.done():
                try:
                    future.set_exception(ZygoteDied("the sandbox zygote died while the job ran"))
                    future.exception()  # marks it retrieved: a spare nobody awaits must not warn
                except RuntimeError:  # its event loop is already closed: nobody waits on it
                    pass
        self._exits.clear()

    async def spawn(self, job_id: str, fds: list[int]) -> asyncio.Future:
        """Ask for a child; returns the future of its exit report."""
        if not self.alive:
            raise ZygoteDied("the sandbox zygote is not running")
        future = asyncio.get_running_loop().create_future()
        self._exits[job_id] = future
        await self._send({"spawn": job_id}, fds)
        return future

    async def kill(self, job_id: str) -> None:
        if self.alive:
            await self._send({"kill": job_id}, [])

    async def _send(self, msg: dict, fds: list[int]) -> None:
        data = json.dumps(msg).encode()
        for _ in range(1000):
            try:
                socket.send_fds(self.ctl, [data], fds)
                return
            except BlockingIOError:
                await asyncio.sleep(0.005)
            except OSError as exc:
                self._die()
                raise ZygoteDied(f"the sandbox zygote stopped listening: {exc}") from exc
        raise ZygoteDied("the sandbox zygote is not reading its requests")

    def host_pids(self) -> list[int]:
        """The zygote's process tree as host pids (bwrap, its init, the zygote, live jobs). A job
        may exit mid-walk: the glob module skips its /proc folder (Path.glob in 3.11 raises)."""
        pids, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            for task in map(Path, glob.glob(f"/proc/{pid}/task/*/children")):
                try:
                    todo += [int(c) for c in task.read_text().split()]
                except OSError:
                    pass
        return pids

    def terminate(self) -> None:
        """Close the socket (the zygote exits and takes its jobs) and kill the process."""
        self.dead = True
        if self._reader is not None:
            try:
                self._reader.cancel()
            except RuntimeError:  # its event loop is already closed
                pass
        try:
            self.ctl.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)  # bwrap and everything in its session
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._die()
