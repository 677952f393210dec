"""Host of one serving engine inside the sandbox: confine, bridge, run the engine, report.

Started by the parent (sandbox/service.py, for any service) as ``python -m ia_worker.engine_host
<engine.json>`` inside its own bubblewrap (new user, PID, mount, IPC and network
namespaces: the network has only loopback), already in the engine's own cgroup. The
order is the security argument, as for a job child (harness.py):

1. read engine.json (written by the parent; nothing of the agent's has run yet) and lower
   this session's priority to its `nice` (bwrap made the session, so the kernel schedules
   it as one group against the server's: raising a nice needs no privilege, and everything
   started later inherits it);
2. confine this process, so that everything it starts inherits it: Landlock (read only
   what the policy lists, write only the engine's own folder, TCP bind/connect only on
   the ports its spec lists, or any port when its spec says it picks its own: inside the
   namespace they reach only itself), seccomp (the job filter, but IPv4/IPv6 sockets allowed: the
   namespace has only loopback; netlink too for a service that picks its own ports, to list
   that loopback), rlimits (file size, open files, no core dumps);
3. listen on a UNIX socket in the engine's folder and relay every connection to the
   engine's loopback port: the host reaches the engine without the engine reaching the
   host's network (no TCP leaves the namespace, and Landlock closes every other port);
4. only then start the engine (agent-influenced code: a workspace engine fork, kernels);
5. when it exits, write ``exit.json`` with its return code and end; on SIGTERM stop it
   (SIGTERM, a grace period, SIGKILL). The cgroup kill in the parent is the backstop.

Stdlib only, like the rest of the worker side.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

from . import confine, seccomp

EXIT_FILE = "exit.json"
LOG_FILE = "engine.log"
_CHUNK = 1 << 16
# Connections the bridge's UNIX socket queues before it accepts them (the kernel caps it at
# net.core.somaxconn). asyncio's default of 100 was below a load generator's 256 connections
# opened at once; a connect() to a full queue fails (EAGAIN) at once on a UNIX socket.
_BACKLOG = 4096


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    folder = Path(spec["folder"])
    os.chdir(folder)
    _lower_priority(int(spec["nice"]))
    layers = _confine(spec)
    (folder / "confined.json").write_text(json.dumps(layers))
    return asyncio.run(_serve(spec, folder))


def _lower_priority(nice: int) -> None:
    """The session's autogroup (how the kernel shares CPU between sessions, when it groups
    them) and this process's own nice (inherited by the engine and every child)."""
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(nice))
    except OSError:
        pass  # a kernel without autogroups (or with them off): the per-process nice decides
    os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))


def _confine(spec: dict) -> dict:
    layers: dict = {}
    rules = spec.get("landlock")
    if rules:
        layers["landlock_abi"] = confine.apply_landlock(
            rules["read_only"],
            rules["read_write"],
            rules["devices"],
            tcp_ports=None if spec["tcp_ports"] is None else tuple(map(int, spec["tcp_ports"])),
        )
    if spec.get("seccomp"):
        layers["seccomp_instructions"] = seccomp.apply_seccomp(
            seccomp.build_seccomp_filter(allow_inet=True, allow_netlink=bool(spec.get("netlink")))
        )
    for which, value in (
        (resource.RLIMIT_FSIZE, spec["file_bytes"]),
        (resource.RLIMIT_NOFILE, spec["num_files"]),
        (resource.RLIMIT_CORE, 0),
    ):
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
    return layers


async def _serve(spec: dict, folder: Path) -> int:
    port = int(spec["port"])
    sock_path = str(folder / spec["socket"])
    bridge = await asyncio.start_unix_server(
        lambda r, w: _relay(r, w, port), path=sock_path, backlog=_BACKLOG
    )
    os.chmod(sock_path, 0o600)
    with open(folder / LOG_FILE, "ab", buffering=0) as log:
        proc = subprocess.Popen(
            spec["argv"],
            env=spec["env"],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    exited = loop.run_in_executor(None, proc.wait)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([exited, stopping], return_when=asyncio.FIRST_COMPLETED)
    requested = stop.is_set()
    if proc.poll() is None:
        proc.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(exited), float(spec.get("grace_s", 10)))
        except asyncio.TimeoutError:
            proc.kill()
    code = await exited
    stopping.cancel()
    bridge.close()
    (folder / EXIT_FILE).write_text(json.dumps({"returncode": code, "stopped": requested}))
    return 0 if requested else (code if code and code > 0 else 1)


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int) -> None:
    """One host connection <-> one connection to the engine's loopback port."""
    try:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        writer.close()  # the engine is not listening (yet): the host sees a closed connection
        return
    await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer), return_exceptions=True)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
