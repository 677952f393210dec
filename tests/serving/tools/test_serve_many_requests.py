"""Thousands of tiny requests through the engine's bridge (issue 36, item 2): before the fix 418
of 5,000 (101 of 2,000 of 4 -> 2 tokens) failed with "[Errno 22] Invalid argument" reading the
engine's socket: 256 connections opened at once overflowed the bridge's accept queue of 100,
and asyncio handed back sockets that were never connected. A request may fail only when the
engine failed it: the engine's own counter of finished requests is the witness."""

from __future__ import annotations

import re

import httpx
import pytest
from conftest import call
from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # 2,000 requests at once: alone on the host

N = 2000


def finished(metrics: str) -> float:
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^vllm:request_success_total\{[^}]*\} (\S+)$", metrics, re.M)
    )


@pytest.mark.anyio
async def test_thousands_of_tiny_requests_fail_only_when_the_engine_fails_them(serve_client):
    c = serve_client
    eng = await call(c, "launch_serve", engine="builtin", args={"model": "tiny"})
    transport = httpx.AsyncHTTPTransport(uds=eng["socket"])
    async with httpx.AsyncClient(transport=transport, base_url="http://e") as http:
        before = finished((await http.get("/metrics")).text)
        out = await call(
            c,
            "serve_benchmark",
            handle=eng["handle"],
            # all at once: the load generator opens its 256 connections together
            workload={"num_requests": N, "input_len": 4, "output_len": 2, "warmup": 0},
            repeats=1,
            time_budget_s=3000,
        )
        after = finished((await http.get("/metrics")).text)
    m = out["metrics"]
    assert (m["completed"], m["failed"]) == (N, 0), out["repeats"][0].get("errors")
    assert after - before >= N  # the engine finished every one (and the cost probe's)
