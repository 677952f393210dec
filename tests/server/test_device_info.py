"""device_info: facts from a probe job inside the sandbox, or a plain account of why not."""

from __future__ import annotations

import platform

import pytest
from conftest import call

from infra_agent.server.context import ServerState

pytestmark = pytest.mark.anyio


async def test_device_info_from_the_sandboxed_worker(client, server):
    out = await call(client, "device_info")
    isolation = server.state.sandbox.isolation
    if not isolation.sandboxed:  # no bwrap here and the server was not started --allow-unsandboxed
        assert out["sandbox_available"] is False and "isolation" in out["sandbox_error"]
        return
    assert out["sandbox_available"] is True and out["sandbox_error"] is None, out["sandbox_error"]
    assert (
        out["isolation_level"] == isolation.level and out["isolation"]["layers"] == isolation.layers
    )
    assert out["versions"]["python"] == platform.python_version()
    assert out["versions"]["torch"] == out["server_view"]["packages"]["torch"]
    assert out["worker_facts"]["cuda_available"] == bool(out["devices"])
    assert out["device"] == ("cuda" if out["devices"] else "cpu")
    assert out["num_cpus_usable"] >= 1 and out["cpu_model"]
    assert out["isolation_level"] in out["summary"]


async def test_device_info_says_plainly_when_the_sandbox_is_unavailable(client, monkeypatch):
    def broken(self):
        raise RuntimeError("the sandbox runner is not available in this install (test)")

    monkeypatch.setattr(ServerState, "sandbox", property(broken))
    out = await call(client, "device_info")
    assert out["sandbox_available"] is False and out["isolation_level"] == "unavailable"
    assert "not available in this install" in out["sandbox_error"]
    assert (
        out["summary"].startswith("sandbox unavailable")
        and "agent code cannot run" in out["summary"]
    )
    assert out["versions"]["python"] == platform.python_version() and out["server_view"]["num_cpus"]


def test_device_probe_op_reports_cuda_devices(tmp_path, monkeypatch):
    """The GPU branch of the probe, with torch.cuda stubbed (no GPU on CI)."""
    from types import SimpleNamespace

    import torch

    from infra_agent.sandbox.worker.context import JobContext
    from infra_agent.sandbox.worker.ops import device_probe

    props = SimpleNamespace(
        name="NVIDIA H100 80GB HBM3",
        major=9,
        minor=0,
        total_memory=85 * 2**30,
        multi_processor_count=132,
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91000)
    ctx = JobContext(
        job_dir=tmp_path, in_dir=tmp_path, out_dir=tmp_path, workspace=None, device="cuda"
    )
    facts = device_probe.run({}, ctx)
    assert (
        facts["cuda_available"] is True
        and facts["job_device"] == "cuda"
        and facts["cudnn"] == 91000
    )
    assert facts["devices"] == [
        {
            "index": i,
            "name": props.name,
            "capability": "9.0",
            "total_memory_bytes": 85 * 2**30,
            "multi_processor_count": 132,
        }
        for i in range(2)
    ]
    assert facts["torch"] == torch.__version__ and facts["num_cpus_usable"] >= 1
    assert (
        facts["peaks_fingerprint"]["name"] == props.name
        and facts["peaks_fingerprint"]["device"] == "cuda"
    )


async def test_device_info_reports_ceilings_only_once_measured(client, server):
    if not server.state.sandbox.isolation.sandboxed:
        pytest.skip("the sandbox cannot run here (no bwrap), so nothing can be measured")
    before = await call(client, "device_info")
    assert before["peaks"] is None and "measure_peaks=true" in before["peaks_note"]
    measured = await call(client, "device_info", measure_peaks=True)
    assert measured["peaks"]["copy_gbps"] > 0 and measured["peaks"]["matmul_tflops"]
    assert measured["peaks_note"] == "measured now" and "GB/s copy" in measured["summary"]
    after = await call(client, "device_info")  # the cache answers; nothing is measured again
    assert after["peaks"] == measured["peaks"] and after["peaks_note"].endswith("cached")
