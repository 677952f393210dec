"""The policy is pure data: what a job may see and use, checked without running anything."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sandbox_helpers import sandbox  # noqa: F401  (the fixture)

from infra_agent.sandbox import Job
from infra_agent.sandbox.cgroups import CgroupManager
from infra_agent.sandbox.isolation import Isolation
from infra_agent.sandbox.outcome import Ending, judge
from infra_agent.sandbox.policy import Layout, Limits, SandboxView
from infra_agent.sandbox.slots import Slots
from infra_agent.sandbox.worker import confine, seccomp


def layout(tmp_path: Path, **kwargs) -> Layout:
    base = dict(
        worker_dir=tmp_path / "worker",
        workspace=tmp_path / "ws",
        jobs_dir=tmp_path / "ws/.state/jobs",
        etc_dir=tmp_path / "etc",
        pkg_dir=tmp_path / "pkg",
        python_prefixes=(Path("/opt/py"),),
        workspace_hidden=(".state",),
        python="/opt/py/bin/python3",
    )
    base.update(kwargs)
    return Layout(**base)


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_bwrap_namespaces_and_binds(tmp_path):
    argv = SandboxView(layout(tmp_path), sandboxed=True).bwrap_argv()
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL" and argv[argv.index("--uid") + 1] == "65534"
    binds = pairs(argv, "--bind") + pairs(argv, "--ro-bind") + pairs(argv, "--dev-bind")
    assert all(src != "/" for src, _ in binds)  # never the whole root
    assert pairs(argv, "--bind") == [
        (str(tmp_path / "ws/.state/jobs"), "/jobs")
    ]  # the only writable bind
    assert (str(tmp_path / "ws"), "/workspace") in pairs(argv, "--ro-bind")
    assert (str(tmp_path / "worker"), "/opt/ia/ia_worker") in pairs(argv, "--ro-bind")
    assert "/workspace/.state" in [
        argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"
    ]  # state masked
    etc = [
        dst
        for _, dst in pairs(argv, "--ro-bind") + pairs(argv, "--ro-bind-try")
        if dst.startswith("/etc")
    ]
    assert "/etc/shadow" not in etc and "/etc" not in etc
    assert "/sys" not in [dst for _, dst in binds] and pairs(argv, "--dev-bind") == []
    view = SandboxView(layout(tmp_path), sandboxed=True)
    assert view.host_path("/jobs/j1/serve.sock") == tmp_path / "ws/.state/jobs/j1/serve.sock"
    with pytest.raises(ValueError):
        view.host_path("/jobs/j1/../../etc/passwd")


def test_gpu_devices_are_bound(tmp_path):
    devices = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")
    view = SandboxView(layout(tmp_path, gpu_devices=devices), sandboxed=True)
    argv = view.bwrap_argv()
    assert pairs(argv, "--dev-bind") == [(d, d) for d in devices]
    assert ("/sys", "/sys") in pairs(argv, "--ro-bind")
    assert set(devices) <= set(view.landlock_rules("/jobs/x")["devices"])


def test_job_gets_its_own_home_and_caches(tmp_path):
    view = SandboxView(layout(tmp_path), sandboxed=True)
    spec = view.job_spec(
        job_id="j1",
        op="noop",
        payload={},
        env={},
        device="cpu",
        limits=Limits(memory_bytes=1 << 30),
        timeout_s=10,
    )
    env = spec["env"]
    for key in (
        "HOME",
        "TMPDIR",
        "TRITON_CACHE_DIR",
        "TORCH_EXTENSIONS_DIR",
        "CUDA_CACHE_PATH",
        "TORCHINDUCTOR_CACHE_DIR",
    ):
        assert env[key].startswith("/jobs/j1/"), key
    assert (
        env["TRITON_INTERPRET"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
    )  # no GPU: interpreted, always
    on_gpu = view.job_spec(
        job_id="j2",
        op="noop",
        payload={},
        env={},
        device="cuda",
        limits=Limits(memory_bytes=1 << 30),
        timeout_s=10,
    )["env"]
    assert "TRITON_INTERPRET" not in on_gpu and "CUDA_VISIBLE_DEVICES" not in on_gpu
    assert spec["rlimits"]["cpu_s"] >= 10
    policy = view.confinement("j1", landlock=True, seccomp=True)
    assert policy["private_mounts"] == {"/tmp": "/jobs/j1/tmp", "/dev/shm": "/jobs/j1/shm"}
    rules = policy["landlock"]
    assert rules["read_write"] == ["/jobs/j1"] and policy["seccomp"]
    assert not any(p == "/jobs" or p.startswith("/jobs/") for p in rules["read_only"])


def test_without_bwrap_landlock_leaves_out_the_state_folder(tmp_path):
    ws = tmp_path / "ws"
    for name in ("kernels", ".state"):
        (ws / name).mkdir(parents=True)
    view = SandboxView(layout(tmp_path), sandboxed=False)
    assert view.bwrap_argv()[0] == "bwrap" and view.zygote_argv(5)[0] == "/opt/py/bin/python3"
    read_only = view.landlock_rules(str(tmp_path / "ws/.state/jobs/j1"))["read_only"]
    assert (
        str(ws / "kernels") in read_only
        and str(ws) not in read_only
        and str(ws / ".state") not in read_only
    )
    assert view.workspace_path(ws / "kernels" / "a.py") == str(ws / "kernels" / "a.py")
    under_tmp = SandboxView(layout(tmp_path, jobs_dir=Path("/tmp/state/jobs")), sandboxed=False)
    assert under_tmp.confinement("j1", landlock=True, seccomp=True)["private_mounts"] == {
        "/dev/shm": "/tmp/state/jobs/j1/shm"
    }  # binding /tmp would hide the job's own folder


def test_isolation_level_names_what_is_in_force():
    full = Isolation(["bwrap", "landlock", "seccomp", "cgroup", "rlimits"])
    assert full.level == "bwrap+landlock+seccomp+cgroup" and full.sandboxed
    bare = Isolation(["rlimits"], {"bwrap": "bwrap not found"})
    assert (
        bare.level == "none"
        and not bare.sandboxed
        and bare.as_dict()["missing"] == {"bwrap": "bwrap not found"}
    )


def test_judge_never_calls_a_crash_success(tmp_path):
    (tmp_path / "result.json").write_text('{"x": 1}')
    assert judge(Ending(wait_status=0), tmp_path)[0] == "ok"
    assert judge(Ending(wait_status=None, done=True), tmp_path)[0] == "ok"
    assert judge(Ending(wait_status=11), tmp_path)[:2] == (
        "crashed",
        {},
    )  # SIGSEGV, even with a result file
    assert judge(Ending(wait_status=0, timed_out=True, timeout_s=5), tmp_path)[0] == "timeout"
    assert judge(Ending(wait_status=0, oom_kills=1, memory_limit_bytes=1 << 30), tmp_path)[
        2
    ].startswith("exceeded the memory limit of 1 GiB")
    (tmp_path / "result.json").unlink()
    (tmp_path / "result.json").symlink_to("/etc/passwd")  # a forged result pointing at a host file
    assert judge(Ending(wait_status=0), tmp_path)[0] == "crashed"


def test_slots_are_first_come_first_served():
    import asyncio

    async def scenario() -> list[int]:
        slots, order = Slots(1), []

        async def job(i: int) -> None:
            async with slots.slot():
                order.append(i)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(job(i) for i in range(5)))
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]


def test_no_silent_downgrade_on_this_host(sandbox):
    """Every layer this host offers is in force; every missing one says why."""
    isolation = sandbox.sb.isolation
    offered = {
        "bwrap": shutil.which("bwrap") is not None,
        "landlock": confine.landlock_abi() > 0,
        "seccomp": seccomp.seccomp_available() is None,
        "cgroup": CgroupManager().available,
    }
    for layer, available in offered.items():
        if available and layer not in isolation.layers:
            raise AssertionError(
                f"{layer} is available but not in force: {isolation.missing.get(layer)}"
            )
        if layer not in isolation.layers:
            assert isolation.missing[layer], layer
    assert sandbox.run(Job(op="noop")).ok
