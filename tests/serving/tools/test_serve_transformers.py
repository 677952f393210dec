"""launch_serve + serve_benchmark against `transformers serve --continuous-batching` on a tiny
checkpoint the test builds (a real third-party engine, sandboxed; nothing downloaded)."""

from __future__ import annotations

import pytest
from conftest import ToolCallError, call
from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)

pytestmark = pytest.mark.slow


@pytest.mark.anyio
async def test_transformers_serve_benchmark(serve_client):
    with pytest.raises(ToolCallError, match="takes no kernels"):
        await call(
            serve_client,
            "launch_serve",
            engine="transformers",
            args={"model": "tiny", "kernels": {"a": "b"}},
        )
    launched = await call(
        serve_client, "launch_serve", engine="transformers", args={"model": "tiny"}
    )
    assert launched["extensions"] == [] and launched["metrics"] is False
    handle = launched["handle"]
    listed = await call(serve_client, "list_serves")
    assert [s["handle"] for s in listed["serves"]] == [handle]
    out = await call(
        serve_client,
        "serve_benchmark",
        handle=handle,
        repeats=1,
        workload={"num_requests": 64, "input_len": 12, "output_len": 4, "rate": 16.0, "seed": 1},
        criteria=["failed == 0", "completed == 64"],
    )
    assert out["repeats"][0]["errors"] == {}
    assert out["metrics"]["completed"] == 64 and out["metrics"]["failed"] == 0
    assert out["criteria"]["answer"] == "supported"
    for name in ("ttft_p50", "tpot_p50", "itl_p50", "e2el_p50", "output_throughput"):
        assert out["metrics"][name] is not None and out["metrics"][name] > 0
    assert out["output_tokens_source"] == "usage"
    assert any(a.endswith("/latency.png") for a in out["artifacts"])
    stopped = await call(serve_client, "stop_serve", handle=handle)
    assert stopped["handle"] == handle
    with pytest.raises(ToolCallError, match="was already stopped \\(by stop_serve"):
        await call(serve_client, "serve_benchmark", handle=handle)
