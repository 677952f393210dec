"""A night's ledger for the report's tests and bench/report_generation.py: real tool calls
through the MCP server on a copy of the zoo (a passing and a failing numerics check, a
microbench A/B across an edit of the kernel, a compile A/B, a profile with its Perfetto
trace, a candidate that does not parse), and a way to grow it to thousands of rows by
copying them."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import NamedTuple

import anyio
from conftest import ToolCallError, call, copy_zoo
from mcp import Client

from infra_agent.server.app import build_server

IMPL = "vector_add/vector_add_triton.py"
LAUNCH = "    vector_add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)\n"
# The same answer from eight launches instead of one: clearly slower, whatever the machine.
LAUNCH_8X = "    for _ in range(8):\n    " + LAUNCH
SUBTRACTS = "def vector_add(x, y):\n    return x - y\n"
DOES_NOT_PARSE = "def vector_add(x, y):\n    return x +\n"
SHAPE = [{"N": 1000}]


class Night(NamedTuple):
    workspace: Path
    state_dir: Path
    numerics_pass: str  # experiment ids
    numerics_fail: str
    bench_before: str  # microbench of the zoo's vector_add
    bench_after: str  # microbench of the edited file, baseline=bench_before
    compile: str
    compile_after: str  # BLOCK_SIZE 256 instead of 1024, baseline=compile
    profile: str  # its artifacts: trace.perfetto.json and timeline.png
    broken: str  # a call that failed (status error)


def make_night(parent: Path) -> Night:
    workspace = copy_zoo(parent)
    return anyio.run(_calls, workspace)


async def _calls(workspace: Path) -> Night:
    server = build_server(workspace)
    numerics = dict(kernel="vector_add", shapes=[{"N": 300}], dtypes=["float32"], trials=1)
    try:
        async with Client(server) as client:
            passing = await call(
                client,
                "check_numerics",
                **numerics,
                hypothesis="the Triton vector_add matches the reference",
                expect=["verdict == 'pass'"],
            )
            failing = await call(
                client,
                "check_numerics",
                **numerics,
                source=SUBTRACTS,
                entry="vector_add",
                hypothesis="subtracting is as good as adding",
                expect=["verdict == 'pass'"],
            )
            # budgets with room for a loaded machine (the interpreter's first calls are slow)
            before = await call(
                client,
                "microbench",
                kernel="vector_add",
                impl="triton",
                shapes=SHAPE,
                budget_ms=2000,
            )
            impl = workspace / IMPL
            impl.write_text(impl.read_text().replace(LAUNCH, LAUNCH_8X))
            after = await call(
                client,
                "microbench",
                kernel="vector_add",
                impl="triton",
                baseline=before["experiment_id"],
                shapes=SHAPE,
                budget_ms=3000,
                hypothesis="eight launches per call are slower",
                expect=["ratio > 1.2"],
            )
            compiled = await call(client, "compile_kernel", kernel="vector_add", target="sm_80")
            smaller_blocks = await call(
                client,
                "compile_kernel",
                kernel="vector_add",
                source=impl.read_text().replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 256"),
                target="sm_80",
                baseline=compiled["experiment_id"],
            )
            profiled = await call(
                client, "profile", kernel="vector_add", impl="triton", calls=5, sample_threads=False
            )
            with contextlib.suppress(ToolCallError):  # the tool answers with the SyntaxError
                await call(
                    client, "check_numerics", **numerics, source=DOES_NOT_PARSE, entry="vector_add"
                )
    finally:
        await server.aclose()
    return Night(
        workspace,
        workspace / ".infra-agent",
        passing["experiment_id"],
        failing["experiment_id"],
        before["experiment_id"],
        after["experiment_id"],
        compiled["experiment_id"],
        smaller_blocks["experiment_id"],
        profiled["experiment_id"],
        _last_id(workspace / ".infra-agent" / "ledger.sqlite"),  # an error reply names no id
    )


def _last_id(ledger: Path) -> str:
    conn = sqlite3.connect(ledger)
    try:
        return conn.execute("SELECT id FROM experiments ORDER BY seq DESC LIMIT 1").fetchone()[0]
    finally:
        conn.close()


def grow_ledger(ledger: Path, total_rows: int) -> int:
    """Copy the ledger's rows (in order, again and again) until it holds `total_rows`; the
    copies get ids of their own and keep naming the original baselines. Returns the count."""
    conn = sqlite3.connect(ledger)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(experiments)")]
    copied = ", ".join(c for c in columns if c not in ("seq", "id"))
    originals = [r[0] for r in conn.execute("SELECT seq FROM experiments ORDER BY seq")]
    with conn:
        count = len(originals)
        while count < total_rows:
            for seq in originals[: total_rows - count]:
                conn.execute(
                    f"INSERT INTO experiments ({copied}) SELECT {copied} FROM experiments "
                    "WHERE seq = ?",
                    (seq,),
                )
            count = conn.execute("SELECT COUNT(*) FROM experiments").fetchone()[0]
        conn.execute(
            "UPDATE experiments SET id = printf('e%05d-%s', seq, lower(hex(randomblob(2)))) "
            "WHERE id IS NULL"
        )
    conn.close()
    return count
