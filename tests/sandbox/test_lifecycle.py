"""The sandbox's own life: refusing without isolation, queueing, zygote restarts, dying with its server."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import multiprocessing.synchronize
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sandbox_helpers import TEST_LIMITS, make_workspace, sandbox  # noqa: F401  (the fixture)

import infra_agent.sandbox.isolation as isolation_module
from infra_agent.sandbox import Job, Sandbox, SandboxError
from infra_agent.sandbox.cgroups import CgroupManager

SLEEP = "import time\ndef main(seconds):\n    time.sleep(seconds)\n    return seconds\n"


def _sleep_job(seconds: float, **kwargs) -> Job:
    return Job(op="probe", payload={"source": SLEEP, "entry": "main", "args": [seconds]}, **kwargs)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_refuses_without_isolation_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setattr(
        isolation_module, "_probe_bwrap", lambda view, timeout_s: "bwrap not found on PATH"
    )
    ws = make_workspace(tmp_path)
    sb = Sandbox(ws, tmp_path / "state", limits=TEST_LIMITS)
    report = sb.isolation.as_dict()
    assert not report["sandboxed"] and "bwrap" not in report["level"]
    assert "apt-get install bubblewrap" in report["missing"]["bwrap"]
    with pytest.raises(SandboxError, match="--allow-unsandboxed"):
        asyncio.run(sb.run(Job(op="noop")))

    async def allowed() -> None:
        sb = Sandbox(ws, tmp_path / "state", allow_unsandboxed=True, limits=TEST_LIMITS)
        try:
            res = await sb.run(
                Job(
                    op="probe",
                    payload={"source": "import os\ndef main():\n    return os.getcwd()\n"},
                )
            )
            assert res.ok, res.error
            assert res.result["value"] == str(res.out_dir.parent)  # host paths: no mount namespace
            # Landlock still holds where the kernel has it
            res = await sb.run(
                Job(
                    op="probe",
                    payload={
                        "source": "def main(p):\n    open(p, 'w').write('x')\n",
                        "args": [str(tmp_path / "planted")],
                    },
                )
            )
            if "landlock" in sb.isolation.layers:
                assert res.status == "error" and "Permission denied" in res.error
                assert not (tmp_path / "planted").exists()
        finally:
            await sb.aclose()

    asyncio.run(allowed())


def test_queue_reports_progress_while_waiting(tmp_path):
    ws = make_workspace(tmp_path)

    async def scenario() -> None:
        sb = Sandbox(
            ws,
            tmp_path / "state",
            allow_unsandboxed=True,
            concurrency={"run": 1},
            limits=TEST_LIMITS,
        )
        messages: dict[int, list[str]] = {0: [], 1: [], 2: []}

        def recorder(i):
            async def progress(done, total, message):
                messages[i].append(message)

            return progress

        try:
            await sb.run(Job(op="noop"))  # start the zygote first
            jobs = [asyncio.create_task(sb.run(_sleep_job(0.6), recorder(i))) for i in range(3)]
            results = await asyncio.gather(*jobs)
            assert all(r.ok for r in results), [r.error for r in results]
            assert messages[0] == []  # it ran at once
            assert messages[1][0].startswith("queued: 0 ahead")
            assert messages[2][0].startswith("queued: 1 ahead") and messages[2][-1].startswith(
                "queued: 0 ahead"
            )
            assert results[2].queued_s > results[1].queued_s > 0.3
            pids = sb.zygote_pids()
            assert pids
        finally:
            await sb.aclose()
        assert _wait_gone(pids) == []  # aclose takes the zygote and its jobs down

    asyncio.run(scenario())


def _zygote_python_pid(sb: Sandbox) -> int:
    for pid in sb.zygote_pids():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if (
            Path(f"/proc/{pid}/comm").read_text().strip() != "bwrap"
            and b"ia_worker.zygote" in cmdline
        ):
            return pid
    raise AssertionError("no zygote process found")


def test_zygote_restarts_and_queued_jobs_still_run(tmp_path):
    ws = make_workspace(tmp_path)

    async def scenario() -> None:
        sb = Sandbox(
            ws,
            tmp_path / "state",
            allow_unsandboxed=True,
            concurrency={"run": 1},
            limits=TEST_LIMITS,
        )
        try:
            await sb.run(Job(op="noop"))
            victim = _zygote_python_pid(sb)
            running = asyncio.create_task(sb.run(_sleep_job(30)))
            queued = [
                asyncio.create_task(sb.run(Job(op="noop", payload={"echo": i}))) for i in range(2)
            ]
            await asyncio.sleep(1.0)
            os.kill(victim, signal.SIGKILL)
            first = await asyncio.wait_for(running, 30)
            assert first.status == "crashed" and "sandbox worker process died" in first.error, (
                first.error
            )
            later = await asyncio.wait_for(asyncio.gather(*queued), 120)
            assert [r.status for r in later] == ["ok", "ok"], [r.error for r in later]
            assert [r.result["echo"] for r in later] == [0, 1]
            assert _zygote_python_pid(sb) != victim
        finally:
            await sb.aclose()

    asyncio.run(scenario())


SERVER_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path
    from infra_agent.sandbox import Job, Sandbox

    async def main():
        if sys.argv[3] == "no-bwrap":  # the fallback: no namespaces, so no bwrap --die-with-parent
            import infra_agent.sandbox.isolation as isolation
            isolation._probe_bwrap = lambda view, timeout_s: "disabled for this test"
        sb = Sandbox(Path(sys.argv[1]), Path(sys.argv[2]), allow_unsandboxed=True)
        assert sb.isolation.sandboxed == (sys.argv[3] == "bwrap"), sb.isolation.as_dict()
        await sb.run(Job(op="noop"))
        job = asyncio.create_task(sb.run(Job(op="probe", timeout_s=300, payload={"entry": "main", "source":
            "import ctypes, time\\n"
            "def main():\\n"
            "    ctypes.CDLL(None).prctl(15, b'ia-probe-sleep', 0, 0, 0)\\n"
            "    time.sleep(300)\\n"})))
        await asyncio.sleep(1.5)
        cgroups = [str(b) for b in sb.cgroups.bases.values()]
        print(json.dumps({"pids": sb.zygote_pids(), "cgroups": cgroups}), flush=True)
        await job

    asyncio.run(main())
""")


@pytest.mark.parametrize("mode", ["bwrap", "no-bwrap"])
def test_sigkilled_server_leaves_nothing_and_next_start_is_clean(tmp_path, mode):
    if mode == "bwrap" and not shutil.which("bwrap"):
        pytest.skip("bwrap is not installed on this host")
    ws = make_workspace(tmp_path)
    state = tmp_path / "state"
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER_SCRIPT, str(ws), str(state), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        assert line, server.stderr.read()
        report = json.loads(line)
        pids = report["pids"]
        assert len(pids) >= 3  # bwrap (or the zygote), ..., the sleeping job
        sleepers = [
            p for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "ia-probe-sleep"
        ]
        assert sleepers, "the job did not start"
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
    assert _wait_gone(pids) == [], "zygote or job outlived the SIGKILLed server"

    async def restart() -> None:
        sb = Sandbox(ws, state, allow_unsandboxed=True, limits=TEST_LIMITS)
        try:
            for folder in report["cgroups"]:
                assert not Path(folder).exists(), f"stale cgroup {folder} was not removed"
            res = await sb.run(Job(op="noop", payload={"echo": "clean"}))
            assert res.ok and res.result["echo"] == "clean", res.error
        finally:
            await sb.aclose()

    asyncio.run(restart())


def test_cgroup_folders_are_removed_on_close(tmp_path):
    manager = CgroupManager()
    if not manager.available:
        pytest.skip(f"cgroups not available on this host: {manager.reason}")
    ws = make_workspace(tmp_path)

    async def scenario() -> list[Path]:
        sb = Sandbox(ws, tmp_path / "state", allow_unsandboxed=True, limits=TEST_LIMITS)
        try:
            assert (await sb.run(Job(op="noop"))).ok
            return list(sb.cgroups.bases.values())
        finally:
            await sb.aclose()

    for folder in asyncio.run(scenario()):
        assert not folder.exists()


def test_a_python_started_by_a_path_with_dotdot_runs_jobs_sandboxed(tmp_path):
    """`cd bench && ../.venv/bin/python x.py`: the interpreter's path names a folder the sandbox
    does not mount (bench/), so it must travel normalised, not as typed."""
    if not shutil.which("bwrap"):
        pytest.skip("bwrap is not installed on this host")
    ws = make_workspace(tmp_path)
    outside = tmp_path / "bench"  # a folder no job sees
    outside.mkdir()
    detour = os.path.relpath(sys.executable, outside)  # ../../..: Python keeps it as typed
    script = textwrap.dedent(f"""
        import asyncio, sys
        from infra_agent.sandbox import Job, Sandbox
        async def main():
            sb = Sandbox({str(ws)!r}, {str(tmp_path / "state")!r})
            try:
                res = await sb.run(Job(op="noop", payload={{"echo": sys.executable}}))
                print(res.status, sb.isolation.level, res.error)
            finally:
                await sb.aclose()
        asyncio.run(main())
    """)
    run = subprocess.run(
        [detour, "-c", script], capture_output=True, text=True, timeout=120, cwd=outside
    )
    assert detour.startswith("../") and run.returncode == 0, run.stderr[-2000:]
    status, level, *_ = run.stdout.split()
    assert status == "ok" and level.startswith("bwrap"), run.stdout


def _sweep_stale_cgroups(start: multiprocessing.synchronize.Barrier) -> None:
    start.wait()
    CgroupManager().remove_stale()


def test_sandboxes_starting_together_sweep_the_same_stale_cgroups(tmp_path):
    """Ray starts a node's workers together, and each new sandbox removes the cgroups dead
    servers left: one finding a folder another has just removed goes on (CI once failed a job
    with ENOENT on a dead worker's cgroup folder)."""
    manager = CgroupManager()
    if not manager.available:
        pytest.skip(f"cgroups not available on this host: {manager.reason}")
    dead_pid = 4_000_000_000  # above any pid_max: never alive
    planted = [
        base.parent / f"infra-agent-{dead_pid + i}-1"
        for base in manager.bases.values()
        for i in range(40)
    ]
    for folder in planted:
        for job in ("job-a", "job-b"):
            (folder / job).mkdir(parents=True)
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(4)
    sweepers = [ctx.Process(target=_sweep_stale_cgroups, args=(start,)) for _ in range(4)]
    for p in sweepers:
        p.start()
    for p in sweepers:
        p.join(60)
    assert [p.exitcode for p in sweepers] == [0] * 4, "a sandbox failed on a folder another removed"
    assert [f for f in planted if f.exists()] == []


def _named(name: str) -> list[int]:
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name:
                found.append(int(comm.parent.name))
        except OSError:
            pass
    return found


def test_cancelled_call_kills_its_job(sandbox):
    """An agent that cancels a tool call leaves no job running."""
    source = (
        "import ctypes, time\ndef main():\n    ctypes.CDLL(None).prctl(15, b'ia-cancel-probe', 0, 0, 0)\n"
        "    time.sleep(60)\n"
    )
    future = asyncio.run_coroutine_threadsafe(
        sandbox.sb.run(Job(op="probe", payload={"source": source})), sandbox.runner.loop
    )
    deadline = time.monotonic() + 60
    while not _named("ia-cancel-probe") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _named("ia-cancel-probe"), "the job never started"
    future.cancel()
    assert _wait_gone(_named("ia-cancel-probe"), 10) == []
    sandbox.assert_healthy()


def test_a_running_job_can_serve_on_a_unix_socket(sandbox):
    """How a serving job talks to the parent: TCP is denied, a UNIX socket in its folder is not."""
    source = textwrap.dedent("""
        import os, socket
        from pathlib import Path
        def main():
            path = os.path.join(os.getcwd(), "serve.sock")
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path)
            server.listen(1)
            with open("progress.jsonl", "a") as f:  # what JobContext.progress writes
                f.write('{"done": 0, "total": null, "message": "listening on %s"}\\n' % path)
            conn, _ = server.accept()
            request = conn.recv(100)
            conn.sendall(b"pong:" + request)
            conn.close()
            return "served"
        """)
    messages = []

    async def progress(done, total, message):
        messages.append(message)

    future = asyncio.run_coroutine_threadsafe(
        sandbox.sb.run(Job(op="probe", payload={"source": source}, timeout_s=60), progress),
        sandbox.runner.loop,
    )
    deadline = time.monotonic() + 60
    while not messages and time.monotonic() < deadline:
        time.sleep(0.05)
    assert messages and messages[0].startswith("listening on "), messages
    import socket

    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(sandbox.sb.host_path(messages[0].removeprefix("listening on "))))
    client.sendall(b"ping")
    assert client.recv(100) == b"pong:ping"
    client.close()
    res = future.result(60)
    assert res.ok and res.result["value"] == "served", res.error


def test_survives_a_change_of_event_loop(tmp_path):
    """One Sandbox, used from two event loops in turn (a test runner's, a restarted server's)."""
    sb = Sandbox(
        make_workspace(tmp_path), tmp_path / "state", allow_unsandboxed=True, limits=TEST_LIMITS
    )
    try:
        for i in range(2):
            res = asyncio.run(sb.run(Job(op="noop", payload={"echo": i})))
            assert res.ok and res.result["echo"] == i, res.error
    finally:
        asyncio.run(sb.aclose())


def test_a_socket_closed_while_its_recv_is_cancelled_leaves_the_next_one_heard():
    """The spare job child whose hello went unheard for 10 s, about once per suite run: a job's
    `wait_done` recv is cancelled and its socket closed before the cancellation has run its
    cleanup (supervise, then the runner discarding the child); the next spare's socket takes the
    same descriptor number, and its recv must still hear its child. Deterministic here: the
    order of those steps is forced."""
    from infra_agent.sandbox.child import recv

    async def scenario() -> tuple[bool, tuple[bytes, int] | None]:
        old, old_peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old.setblocking(False)
        pending = asyncio.ensure_future(recv(old, timeout_s=float("inf")))
        await asyncio.sleep(0)  # its reader is registered
        pending.cancel()  # supervise: done.cancel() ...
        number = old.fileno()
        old.close()  # ... then the child is discarded, before the cancellation has run
        new, new_peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        new.setblocking(False)
        reused = new.fileno() == number  # the case that went unheard
        heard = asyncio.ensure_future(recv(new, timeout_s=3.0))  # the next spare's handshake
        await asyncio.sleep(0)
        new_peer.send(b"hello")
        got = await heard
        assert pending.cancelled()
        for s in (old_peer, new, new_peer):
            s.close()
        return reused, got

    reused, got = asyncio.run(scenario())
    assert reused  # the descriptor number was the closed socket's
    assert got is not None and got[0] == b"hello", got
