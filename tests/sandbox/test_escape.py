"""The escape suite, part 1 (what a job can see and reach: files, other jobs, the
network): each probe is a job that tries to get out, and fails. Part 2, resources and
processes, is test_escape_resources.py.

After every probe the sandbox must keep serving: `assert_healthy` runs a normal job.
Probes that need a containment layer first check it with a small version (50
processes before a fork bomb, 1.5 GB before 100 GB, 10 MB before 10 GB) so a probe
that escaped could not take the machine down. A probe the host cannot test is
skipped with the exact reason.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from sandbox_helpers import sandbox  # noqa: F401  (the fixture)

import infra_agent.sandbox.runner as runner_module

TRY_READ = """
def main(paths):
    out = {}
    for p in paths:
        try:
            if __import__("os").path.isdir(p):
                out[p] = "LISTED:" + ",".join(sorted(__import__("os").listdir(p)))
            else:
                with open(p, "rb") as f:
                    out[p] = "READ:" + f.read(64).decode(errors="replace")
        except OSError as e:
            out[p] = f"{type(e).__name__}: {e.strerror}"
    return out
"""

TRY_WRITE = """
import os
def main(paths):
    out = {}
    for p in paths:
        p = p.replace("{cwd}", os.getcwd()).replace("{jobs}", os.path.dirname(os.getcwd()))
        try:
            with open(p, "w") as f:
                f.write("planted")
            out[p] = "WROTE"
        except OSError as e:
            out[p] = f"{type(e).__name__}: {e.strerror}"
    return out
"""


def _denied(outcomes: dict) -> bool:
    return all(
        not v.startswith(("READ:", "WROTE")) and not (v.startswith("LISTED:") and v != "LISTED:")
        for v in outcomes.values()
    )


def test_cannot_read_shadow_ssh_or_home(sandbox):
    home = Path.home()
    res = sandbox.probe(
        TRY_READ,
        ["/etc/shadow", "/etc/gshadow", str(home / ".ssh"), str(home), "/root/.ssh/id_rsa"],
    )
    assert res.ok, res.error
    assert _denied(res.result["value"]), res.result["value"]
    sandbox.assert_healthy()


def test_cannot_read_server_source(sandbox, tmp_path):
    server_file = Path(importlib.util.find_spec("infra_agent.server.app").origin).resolve()
    runner_file = Path(runner_module.__file__).resolve()
    res = sandbox.probe(
        TRY_READ,
        [
            str(server_file),
            str(runner_file),
            str(runner_file.parent),
            "/opt/ia/ia_worker/../runner.py",
            "/opt/ia/runner.py",
        ],
    )
    assert res.ok, res.error
    assert _denied(res.result["value"]), res.result["value"]
    res = sandbox.probe("""
        def main():
            import importlib
            try:
                importlib.import_module("infra_agent.sandbox.runner")
                return "imported"
            except Exception as e:
                return type(e).__name__
        """)
    assert res.ok and res.result["value"] != "imported", res.result
    sandbox.assert_healthy()


def test_cannot_read_reference_outputs_or_ledger(sandbox):
    """User workspaces keep the server's state in <workspace>/.infra-agent: invisible to jobs."""
    state = sandbox.sb.state_dir
    secret = state / "refs" / "secret.pt"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("reference outputs")
    # the planner refuses to name the state folder at all; the job's own view masks it too
    with pytest.raises(ValueError, match="hidden from jobs"):
        sandbox.sb.workspace_path(secret)
    in_view = Path(sandbox.sb.view.workspace_root) / state.relative_to(sandbox.sb.workspace)
    res = sandbox.probe(
        TRY_READ,
        [
            str(in_view / "refs" / "secret.pt"),
            str(in_view),
            str(secret),
            str(in_view / "seed-secret"),
            str(in_view / "ledger.sqlite"),
        ],
    )
    assert res.ok, res.error
    assert _denied(res.result["value"]), res.result["value"]
    # while the rest of the workspace is readable
    res = sandbox.probe(
        TRY_READ, [sandbox.sb.workspace_path(sandbox.sb.workspace / "kernels" / "hello.py")]
    )
    assert list(res.result["value"].values())[0].startswith("READ:def hello"), res.result


def test_cannot_read_or_write_another_jobs_folder(sandbox):
    first = sandbox.probe("""
        import os
        def main():
            with open("secret.txt", "w") as f:
                f.write("job one's secret")
            return os.getcwd()
        """)
    assert first.ok, first.error
    other = first.result["value"]
    res = sandbox.probe(TRY_READ, [f"{other}/secret.txt", other, os.path.dirname(other)])
    assert res.ok and _denied(res.result["value"]), res.result
    res = sandbox.probe(TRY_WRITE, [f"{other}/planted.txt", f"{other}/out/result.pt"])
    assert res.ok and _denied(res.result["value"]), res.result
    sandbox.assert_healthy()


def test_cannot_write_outside_its_folder(sandbox):
    targets = [
        "{jobs}/planted",
        "/workspace/planted",
        "/workspace/kernels/hello.py",
        "/opt/ia/ia_worker/ops/planted.py",
        "/usr/planted",
        str(sandbox.sb.state_dir / "planted"),
        str(sandbox.sb.workspace / "planted"),
    ]
    res = sandbox.probe(TRY_WRITE, targets + ["{cwd}/allowed.txt"])
    assert res.ok, res.error
    outcomes = res.result["value"]
    allowed = [k for k in outcomes if k.endswith("/allowed.txt")]
    assert outcomes.pop(allowed[0]) == "WROTE"  # the job's own folder is writable
    assert _denied(outcomes), outcomes
    assert not (sandbox.sb.workspace / "planted").exists()
    sandbox.assert_healthy()


def test_tmp_and_shm_are_private_to_each_job(sandbox):
    """Tools that hard-code /tmp or /dev/shm work, and the next job sees none of it."""
    src = """
        import multiprocessing, os
        def square(x):
            return x * x
        def main():
            seen = {d: sorted(os.listdir(d)) for d in ("/tmp", "/dev/shm")}
            for d in ("/tmp", "/dev/shm"):
                with open(os.path.join(d, "planted"), "w") as f:
                    f.write("for the next job")
            with multiprocessing.get_context("fork").Pool(2) as pool:  # semaphores live in /dev/shm
                squares = pool.map(square, range(4))
            return {"seen": seen, "squares": squares}
        """
    first = sandbox.probe(src)
    if first.status == "error" and "Permission denied" in first.error:
        pytest.skip(
            "jobs get no private /tmp here (no private mount namespace, or the Python "
            "install lies under /tmp, as in a CI clone there); /tmp and /dev/shm stay "
            "closed by Landlock instead"
        )
    assert first.ok, first.error
    assert first.result["value"]["squares"] == [0, 1, 4, 9]
    assert (first.out_dir.parent / "tmp" / "planted").exists()  # it lives in the job's own folder
    second = sandbox.probe(src)
    assert second.ok and second.result["value"]["seen"] == {"/tmp": [], "/dev/shm": []}, (
        second.result
    )


def test_no_dns_and_no_connect(sandbox):
    res = sandbox.probe(
        """
        import socket
        def main():
            out = {}
            for name, attempt in {
                "dns": lambda: socket.getaddrinfo("example.com", 443),
                "tcp": lambda: socket.create_connection(("1.1.1.1", 443), timeout=3),
                "udp": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("1.1.1.1", 53)),
                "ipv6": lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM),
                "raw": lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW),
            }.items():
                try:
                    attempt()
                    out[name] = "CONNECTED"
                except OSError as e:
                    out[name] = f"{type(e).__name__}: {e}"
            return out
        """,
        timeout_s=30,
    )
    assert res.ok, res.error
    assert all("CONNECTED" not in v for v in res.result["value"].values()), res.result
    sandbox.assert_healthy()
