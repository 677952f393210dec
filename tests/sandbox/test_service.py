"""Sandbox.start_service: a ServiceSpec is plain data, its policy is the jobs' policy plus
exactly what it asks for, and a started service is confined, reachable and fully stopped."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import process_cpu_s

from infra_agent.sandbox import Limits, Mount, Sandbox, SandboxError, ServiceSpec
from infra_agent.sandbox.policy import Layout, SandboxView
from infra_agent.sandbox.worker.confine import landlock_abi

GRANTS = dict(
    port=8000,
    loopback_ports=(29500, 5557),
    shared_memory=True,
    executables=("g++",),
    mounts=(Mount("/srv/model", "/model"), Mount("/srv/cache", "/shared-cache", writable=True)),
    env={"HF_HOME": "/jobs/engine-x/cache/hf"},
    python_path=("/opt/ia/pkgs",),
    memory_bytes=1 << 30,
    num_processes=256,
    disk_bytes=1 << 28,
    num_files=1024,
    grace_s=3.0,
)


def _view(tmp_path: Path, sandboxed: bool = True) -> SandboxView:
    layout = Layout(
        worker_dir=tmp_path / "worker",
        workspace=tmp_path / "ws",
        jobs_dir=tmp_path / "state/jobs",
        etc_dir=tmp_path / "state/etc",
        pkg_dir=tmp_path / "state/pkg",
        python_prefixes=(Path(sys.prefix),),
    )
    return SandboxView(layout, sandboxed=sandboxed)


def test_a_spec_is_plain_data_that_round_trips_through_json():
    spec = ServiceSpec(name="engine-x", argv=("python", "-m", "engine"), **GRANTS)
    again = ServiceSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec and again.tcp_ports == (8000, 29500, 5557)


@pytest.mark.parametrize(
    "bad",
    [
        dict(name="../up"),
        dict(port=0),
        dict(loopback_ports=(70000,)),
        dict(mounts=(Mount("model", "/model"),)),
    ],
)
def test_a_bad_spec_is_refused_with_the_reason(bad):
    with pytest.raises(ValueError):
        ServiceSpec(**{"name": "engine-x", "argv": ("true",), "port": 8000, **bad})


def test_the_service_policy_is_the_job_policy_plus_its_grants(tmp_path):
    view = _view(tmp_path)
    state = tmp_path / "srv/model/.infra-agent"  # the server's state inside a mount: masked there
    spec = ServiceSpec(
        name="engine-x",
        argv=("python",),
        **{
            **GRANTS,
            "mounts": (
                Mount(str(tmp_path / "srv/model"), "/model"),
                Mount("/srv/cache", "/shared-cache", writable=True),
            ),
        },
    )
    argv = view.service_bwrap_argv(spec, masked=(state.resolve(),))
    assert argv[: len(view.bwrap_argv())] == view.bwrap_argv()
    extra = argv[len(view.bwrap_argv()) :]
    assert extra == [
        "--ro-bind",
        str((tmp_path / "srv/model").resolve()),
        "/model",
        "--tmpfs",
        "/model/.infra-agent",
        "--remount-ro",
        "/model/.infra-agent",
        "--bind",
        "/srv/cache",
        "/shared-cache",
        "--tmpfs",
        "/dev/shm",
    ]

    host = view.service_host_spec(
        spec,
        "/jobs/engine-x",
        device="cpu",
        limits=Limits(num_files=4096),
        landlock=True,
        seccomp=True,
    )
    jobs_rules = view.landlock_rules("/jobs/engine-x")
    assert host["tcp_ports"] == [8000, 29500, 5557] and host["num_files"] == 4096
    assert host["landlock"]["read_only"] == [*jobs_rules["read_only"], "/model", "/opt/ia/pkgs"]
    assert host["landlock"]["read_write"] == ["/jobs/engine-x", "/shared-cache", "/dev/shm"]
    assert (
        host["env"]["PYTHONPATH"] == "/opt/ia/pkgs:/opt/ia"
        and host["env"]["HF_HOME"] == GRANTS["env"]["HF_HOME"]
    )
    assert host["env"]["HOME"] == "/jobs/engine-x/home"  # the job's per-process env underneath

    assert host["netlink"] is False
    own = ServiceSpec(name="engine-x", argv=("python",), port=8000, own_ports=True)
    own_host = view.service_host_spec(
        own, "/jobs/engine-x", device="cpu", limits=Limits(), landlock=True, seccomp=True
    )
    assert own_host["tcp_ports"] is None and own_host["netlink"] is True  # Landlock leaves TCP

    plain = ServiceSpec(name="engine-x", argv=("python",), port=8000)
    assert view.service_bwrap_argv(plain, masked=()) == view.bwrap_argv()
    rules = view.service_host_spec(
        plain, "/jobs/engine-x", device="cpu", limits=Limits(), landlock=True, seccomp=True
    )["landlock"]
    assert rules["read_write"] == ["/jobs/engine-x"] and "/dev/shm" not in rules["devices"]


# A service that reports what its policy lets it do, then answers HTTP on its port.
PROBE = r"""
import json, os, socket, sys
port, extra = int(sys.argv[1]), int(sys.argv[2])
def bind(p):
    s = socket.socket(); s.bind(("127.0.0.1", p)); s.listen(); return s
def attempt(fn):
    try:
        fn(); return "ok"
    except OSError as exc:
        return type(exc).__name__
ipc = socket.socket(socket.AF_UNIX)
report = {"granted_port": attempt(lambda: bind(extra)),
          "other_port": attempt(lambda: bind(extra + 1)),
          "shm": attempt(lambda: open("/dev/shm/probe", "w").write("1")),
          "ipc_socket": attempt(lambda: ipc.bind(os.environ["HOME"] + "/ipc.sock")),
          "netlink": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
          "packet": attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)),
          "workspace_write": attempt(lambda: open(sys.argv[3] + "/planted", "w").write("1"))}
print(json.dumps(report), flush=True)
server = bind(port)
while True:
    conn, _ = server.accept()
    conn.recv(65536)
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
    conn.close()
"""


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _priorities(pids: list[int]) -> list[tuple[int, str | None]]:
    """(nice, autogroup's "nice N" or None without autogroups) of each process, from /proc."""
    out = []
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text()
        nice = int(stat[stat.rindex(")") + 2 :].split()[16])  # field 19 of proc(5)
        group = Path(f"/proc/{pid}/autogroup")
        out.append((nice, " ".join(group.read_text().split()[1:]) if group.exists() else None))
    return out


async def _get(socket_path: str) -> bytes:
    reader, writer = await asyncio.open_unix_connection(socket_path)
    writer.write(b"GET / HTTP/1.0\r\n\r\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


@pytest.mark.skipif(
    shutil.which("bwrap") is None or landlock_abi() < 4,
    reason="needs bubblewrap and Landlock with TCP rules (ABI 4)",
)
@pytest.mark.parametrize("shared_memory, own_ports", [(True, False), (False, False), (False, True)])
def test_a_started_service_has_its_grants_and_no_more(tmp_path, shared_memory, own_ports):
    async def scenario():
        sb = Sandbox(tmp_path / "ws", tmp_path / "state", limits=Limits(memory_bytes=1 << 30))
        assert sb.isolation.sandboxed
        site = sb.service_site("svc-probe")
        spec = ServiceSpec(
            name="svc-probe",
            port=site.port,
            loopback_ports=(29500,),
            shared_memory=shared_memory,
            own_ports=own_ports,
            argv=(
                site.python,
                "-c",
                PROBE,
                str(site.port),
                "29500",
                sb.workspace_path(sb.workspace),
            ),
        )
        svc = await sb.start_service(spec)
        try:
            for _ in range(200):
                if "\n" in svc.log_tail():
                    break
                await asyncio.sleep(0.1)
            report = json.loads(svc.log_tail().splitlines()[0])
            answer = b""
            for _ in range(50):  # the relay is up before the service listens
                answer = await _get(svc.socket_path)
                if answer:
                    break
                await asyncio.sleep(0.1)
            assert svc.alive and answer.endswith(b"ok")
            assert not sb.cgroups.available or svc.pid in svc.pids()  # bwrap, in its cgroup
            priorities = _priorities([p for p in svc.pids() if _comm(p) != "bwrap"])
        finally:
            await svc.stop()
        assert not svc.alive and not svc.folder.exists() and "granted_port" in svc.log_tail()
        await sb.aclose()
        return report, priorities

    (tmp_path / "ws").mkdir()
    own_group = _priorities([os.getpid()])[0][1]
    report, priorities = asyncio.run(scenario())
    # read from the host, not asked of the service: the host and the service it runs (every
    # process of the session bwrap made) yield the CPU to the server, whose session keeps its own
    assert len(priorities) >= 2 and all(nice == ServiceSpec.nice for nice, _ in priorities), (
        priorities
    )
    groups = {group for _, group in priorities}
    if own_group is not None:  # a kernel that groups sessions (autogroup)
        assert groups == {f"nice {ServiceSpec.nice}"} and own_group != groups, (
            priorities,
            own_group,
        )
    assert report["granted_port"] == "ok", report
    assert report["ipc_socket"] == "ok" and report["workspace_write"] != "ok", report
    assert (report["shm"] == "ok") == shared_memory, report
    # a port of its own choosing, and netlink to list its loopback, only when it asks for them;
    # never another socket family
    expected = "ok" if own_ports else "PermissionError"
    assert report["other_port"] == expected and report["netlink"] == expected, report
    assert report["packet"] == "PermissionError", report


def test_a_missing_executable_is_refused_before_anything_starts(tmp_path):
    (tmp_path / "ws").mkdir()
    sb = Sandbox(tmp_path / "ws", tmp_path / "state", allow_unsandboxed=True)
    spec = ServiceSpec(name="svc-x", argv=("true",), port=8000, executables=("no-such-compiler-x",))
    with pytest.raises(SandboxError, match="no-such-compiler-x"):
        asyncio.run(sb.start_service(spec))
    assert not (tmp_path / "state/jobs/svc-x").exists()


def test_the_cpu_account_says_who_waited_for_a_cpu_as_the_kernel_counts_it():
    """CpuAccount, on two real busy loops pinned to one CPU: one at nice 0, one at nice 19
    (weights 1024 and 15: the second gets ~1.4% of the CPU). The second waited for the CPU far
    longer than it ran; what it ran agrees with the kernel's other account of its CPU time
    (utime + stime in /proc/<pid>/stat, in clock ticks)."""
    import subprocess
    import time

    from infra_agent.sandbox import CpuAccount

    loop = "import os; os.sched_setaffinity(0, {0}); os.nice(%d)\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", loop % nice]) for nice in (0, 19)]
    try:
        time.sleep(2.0)
        busy, starved = (CpuAccount.of({p.pid}) for p in procs)
        ticks_s = process_cpu_s(procs[1].pid)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert busy is not None and starved is not None
    # the nice 19 loop starved; the nice 0 one ran far more and waited less (not nothing: beside
    # two CPU hogs CPU 0 is shared three ways, and it waited as long as it ran)
    assert starved.starved(2.0) and starved.ran_s < 0.25 * starved.waited_s, starved
    assert busy.ran_s > 4 * starved.ran_s and busy.waited_s < starved.waited_s, (busy, starved)
    assert abs(starved.ran_s - ticks_s) <= 0.05 + 0.2 * ticks_s, (starved, ticks_s)
    assert "waited" in starved.words() and starved.load_1m >= 0
