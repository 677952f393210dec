"""The parent's handle on one job child, and the job socket's small protocol.

Over the job's own SOCK_SEQPACKET socket the child sends "hello" (with SCM_CREDENTIALS,
so the kernel tells us its pid as we see it); once it sits in its cgroups we send
{"job_dir", "confine"}; it answers {"confined": layers} or {"confine_error": ...}. Then
it waits, a spare, until a job comes: we write job.json and send {"run": true}; it ends
with {"done": true}. Anything else on the socket is ignored: after "run" the child runs
agent code, which can write there too.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import struct
from pathlib import Path

from .cgroups import CgroupManager, JobCgroup
from .launcher import Zygote, ZygoteDied

# A forked child says hello within milliseconds, and confines itself as fast: one silent for this
# long is stuck. (The "spare that hung before its hello" seen about once per suite run until
# 2026-12-04 was not the child: its hello went unheard, see recv.)
HANDSHAKE_TIMEOUT_S = 10.0


async def recv(
    sock: socket.socket, timeout_s: float = HANDSHAKE_TIMEOUT_S
) -> tuple[bytes, int] | None:
    """One packet and the sender's pid as this process sees it (SCM_CREDENTIALS), or None at EOF/timeout."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    space = socket.CMSG_SPACE(struct.calcsize("iII"))

    def on_readable() -> None:
        try:
            data, ancillary, _, _ = sock.recvmsg(65536, space)
        except BlockingIOError:
            return
        except OSError:
            data, ancillary = b"", []
        pid = 0
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", value[: struct.calcsize("iII")])[0]
        if not future.done():
            future.set_result((data, pid) if data else None)

    # The reader watches a descriptor of this call's own (a dup), never the socket's: a caller
    # may close the socket while this call is still being cancelled (supervise cancels wait_done,
    # then the job's child is discarded), and the next socket made (the next spare's) gets the
    # same number. Watching that number, this call's cleanup removed the new socket's reader,
    # and the event loop, still holding the old registration, never watched the new socket
    # either: the spare's hello went unheard for HANDSHAKE_TIMEOUT_S, about once per suite run.
    if sock.fileno() < 0:  # closed already
        return None
    fd = os.dup(sock.fileno())
    try:
        loop.add_reader(fd, on_readable)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            return None
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


async def wait_done(sock: socket.socket) -> bool:
    """True when the harness says the op finished; False at EOF (the child ended without saying so)."""
    while True:
        packet = await recv(sock, timeout_s=float("inf"))
        if packet is None:
            return False
        if json_or_empty(packet[0]).get("done") is True:
            return True


def json_or_empty(data: bytes) -> dict:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # a JSON bomb is just noise
        return {}
    return value if isinstance(value, dict) else {}


class Child:
    """One forked job child and everything the parent holds for it."""

    def __init__(
        self,
        job_id: str,
        host_dir: Path,
        zygote: Zygote,
        cgroups: CgroupManager,
        cgroup: JobCgroup | None,
        sock: socket.socket,
        out_r: int,
        err_r: int,
    ):
        self.job_id, self.host_dir, self.zygote, self.cgroup, self.sock = (
            job_id,
            host_dir,
            zygote,
            cgroup,
            sock,
        )
        self.cgroups = cgroups
        self.used = False  # a job ran in it: its folder holds results, keep it
        self.out_r, self.err_r = out_r, err_r
        self.exited: asyncio.Future | None = None

    @property
    def usable(self) -> bool:
        return self.zygote.alive and self.exited is not None and not self.exited.done()

    async def kill(self) -> None:
        """Kill the child and everything it started; returns when none of it can run any more."""
        if self.cgroup is None:
            try:
                await self.zygote.kill(
                    self.job_id
                )  # its process group: the best we have without cgroups
            except ZygoteDied:
                pass
            return
        for _ in range(20):  # usually the child is already exiting: a pass or two
            if self.cgroup.kill_listed():
                return
            await asyncio.sleep(0.002)
        await asyncio.to_thread(
            self.cgroup.kill_all
        )  # stubborn (a fork bomb): freeze, kill, repeat

    def discard(self) -> None:
        """Close our ends, kill what is in the cgroup and remove it. Idempotent."""
        for fd in (self.out_r, self.err_r):
            if fd >= 0:
                os.close(fd)
        self.out_r = self.err_r = -1
        self.sock.close()
        if self.cgroup is not None:
            self.cgroup.kill_listed()
            self.cgroups.release(self.cgroup)
            self.cgroup = None
        if not self.used:
            shutil.rmtree(self.host_dir, ignore_errors=True)
        if self.exited is not None and self.exited.done() and not self.exited.cancelled():
            self.exited.exception()  # retrieved: no "never retrieved" warning
