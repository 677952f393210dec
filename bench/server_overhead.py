"""What the MCP adapter and the ledger add to a tool call.

Prints, from one run: server build time; p50/p90 of `describe_kernel` (a) through the
in-memory MCP client (which also validates the result against the output schema with
jsonschema, client-side), (b) through `server.call_tool` (the server's share: argument
validation, ledger open/close, structured output), (c) the tool's own `run()` alone;
the server's overhead per call; and the ledger's cost per row, with 1 and 4 writers.

    python bench/server_overhead.py [--calls N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import anyio
from mcp import Client

from infra_agent.kernels.workspace import EMBEDDED_ROOT
from infra_agent.server.app import build_server
from infra_agent.server.context import CallContext
from infra_agent.server.ledger import Ledger
from infra_agent.tools.describe_kernel import TOOL as DESCRIBE


def p50_p90_ms(samples_s: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples_s, n=10, method="inclusive")
    return statistics.median(samples_s) * 1e3, cuts[8] * 1e3


async def through_mcp(
    workspace: Path, calls: int
) -> tuple[float, list[float], list[float], list[float]]:
    t0 = time.perf_counter()
    server = build_server(workspace)
    build_s = time.perf_counter() - t0
    args = {"kernel": "rmsnorm", "include_source": False}
    mcp_s, server_s, direct_s = [], [], []
    for _ in range(calls):
        t = time.perf_counter()
        await server.call_tool("describe_kernel", args)
        server_s.append(time.perf_counter() - t)
    async with Client(server) as client:
        for _ in range(calls):
            t = time.perf_counter()
            result = await client.call_tool("describe_kernel", args)
            mcp_s.append(time.perf_counter() - t)
            assert not result.is_error
        ctx = CallContext(server.state, "bench")
        for _ in range(calls):
            t = time.perf_counter()
            await DESCRIBE.run(DESCRIBE.input_model(**args), ctx)
            direct_s.append(time.perf_counter() - t)
    await server.aclose()
    return build_s, mcp_s, server_s, direct_s


def ledger_rows(path: Path, rows: int, threads: int) -> float:
    """Seconds per row (open + close) with `threads` writers sharing one Ledger."""
    ledger = Ledger(path)

    def write(n: int) -> None:
        for _ in range(n):
            eid = ledger.open(
                tool="bench",
                arguments={"k": 1},
                kernel=None,
                hypothesis=None,
                git_commit=None,
                git_diff_sha256=None,
                device=None,
                device_fingerprint=None,
            )
            ledger.close_ok(eid, {"v": 1.0}, [])

    workers = [threading.Thread(target=write, args=(rows // threads,)) for _ in range(threads)]
    t = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t
    ledger.close()
    return elapsed / (rows // threads * threads)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rows", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ia-bench-") as tmp:
        workspace = Path(tmp) / "ws"
        shutil.copytree(EMBEDDED_ROOT, workspace, ignore=shutil.ignore_patterns("__pycache__"))
        build_s, mcp_s, server_s, direct_s = anyio.run(through_mcp, workspace, args.calls)
        one = ledger_rows(Path(tmp) / "one.sqlite", args.rows, 1)
        four = ledger_rows(Path(tmp) / "four.sqlite", args.rows, 4)
    mcp_p50, mcp_p90 = p50_p90_ms(mcp_s)
    srv_p50, srv_p90 = p50_p90_ms(server_s)
    run_p50, run_p90 = p50_p90_ms(direct_s)
    print(f"build_server (tool discovery + workspace): {build_s * 1e3:.0f} ms")
    print(
        f"describe_kernel via in-memory MCP client: p50 {mcp_p50:.2f} ms, p90 {mcp_p90:.2f} ms ({args.calls} calls)"
    )
    print(f"describe_kernel via server.call_tool:     p50 {srv_p50:.2f} ms, p90 {srv_p90:.2f} ms")
    print(f"describe_kernel run() alone:              p50 {run_p50:.2f} ms, p90 {run_p90:.2f} ms")
    print(
        f"server adapter + ledger: {srv_p50 - run_p50:.2f} ms per call; the client's output-schema "
        f"validation and transport: {mcp_p50 - srv_p50:.2f} ms ({mcp_p50 / srv_p50:.1f}x the server's share)"
    )
    print(
        f"ledger row (open + close): {one * 1e3:.2f} ms with 1 writer, {four * 1e3:.2f} ms with 4 threads "
        f"(ratio {four / one:.2f})"
    )


if __name__ == "__main__":
    main()
