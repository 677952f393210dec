"""The ledger's page cache is bounded small (issue 36, item 6): a real stdio server answering
listing calls one after another (each a ledger row of ~10 KB) keeps its RSS flat while the
ledger file grows past SQLite's default 2000 KiB cache. Before server/ledger.py set
`cache_size`, the server's RSS rose ~10 KB per list_kernels call until those 2 MB were full
(measured 2026-12-06: 98.6 -> 100.6 MB over 240 calls, then flat; with the cap 98.6 -> 98.7)."""

from __future__ import annotations

import itertools

import pytest
from stdio_server import StdioServer

from infra_agent.server.ledger import CACHE_KIB

pytestmark = pytest.mark.slow

WARMUP_CALLS, CALLS = 20, 300


def test_a_session_of_listings_does_not_fill_a_large_ledger_cache(workspace):
    server = StdioServer(workspace)
    ids = itertools.count(1)
    ledger = workspace / ".infra-agent" / "ledger.sqlite"

    def calls(n: int) -> None:
        for _ in range(n):
            rid = next(ids)
            server.call(rid, "list_kernels", {})
            assert "result" in server.reply(rid)

    try:
        server.initialize()
        calls(WARMUP_CALLS)
        rss0, file0 = server.rss_mb(), ledger.stat().st_size
        calls(CALLS)
        rss1 = server.rss_mb()
        # the second way: the file (its WAL checkpointed into it) grew past SQLite's default
        # cache, so an unbounded-to-2-MB cache would have filled
        wal = ledger.with_name(ledger.name + "-wal")
        written_kib = (ledger.stat().st_size - file0) / 1024
        written_kib += wal.stat().st_size / 1024 if wal.exists() else 0
    finally:
        server.close()
    assert written_kib > 2000, f"the ledger grew only {written_kib:.0f} KiB: too few calls"
    grown_kib = (rss1 - rss0) * 1024
    assert grown_kib < 2 * CACHE_KIB, (
        f"the server's RSS grew {grown_kib:.0f} KiB over {CALLS} list_kernels calls while the "
        f"ledger grew {written_kib:.0f} KiB (cache cap {CACHE_KIB} KiB); see server/ledger.py"
    )
