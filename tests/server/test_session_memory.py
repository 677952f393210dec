"""A long scripted session against a real server process stops growing (issue 36, item 6).

The server on stdio, as an IDE runs it, takes rounds of the fuzzer's kinds of call: listings,
describes, clean errors (unknown handles and kernels, odd `expect` strings, bad arguments, an
engine that exits at once) and calls that draw plots (check_numerics' histogram, microbench's
sweep plot: before tools/common/plot_thread.py each drawing thread loaded its own fonts, ~0.8 MB
of native memory). Its RSS is read from /proc/PID/statm after every round; after a warm-up the
least-squares slope over the second half of the session must stay under SLOPE_BOUND_KB_PER_CALL.
Above it, the session goes on (at most two more half-sessions) and the newest half is fitted
again: the plotting calls' allocator steps RSS 1-2 MB up and down and levels off (an idle fresh
clone once read 24.6 KB/call here, 427 -> 463 MB), where a leak keeps its rate in every window.

Why RSS and not the Python heap: the fonts were native memory tracemalloc never saw. Why the
second half: what a server fills once (imports, matplotlib's first fonts, the ledger, the
sandbox's zygote) is done by then. RSS is not timing: a loaded host slows the session, it does
not move the bytes. The bound: the font leak read 102 KB per call over the second half of
bench/server_memory.py's --heavy session, the fuzz session of issue 36 68 KB per call (352 ->
601 MB over 3,672 calls); the bound is a third of the smaller. Measured 2026-12-06 on a loaded
host: on 0f03b90 (before the font fix) 351 -> 398 MB, 55.2 KB per call over the second half
(this test fails there); on the fix 354 -> 390 MB, 7.2 KB per call (one 5 MB step, then flat).

What a person should look at: the RSS marks in the assertion message.
"""

from __future__ import annotations

import itertools
import statistics

import pytest
from session_calls import CHEAP_CALLS
from stdio_server import StdioServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
]  # RSS grows in more allocator steps beside other tests

SLOPE_BOUND_KB_PER_CALL = 20.0
WARMUP_ROUNDS, ROUNDS = 3, 24

ROUND: list[tuple[str, dict]] = [
    *CHEAP_CALLS,
    ("check_numerics", {"kernel": "vector_add"}),  # its error histogram, drawn after the reply
    ("microbench", {"kernel": "vector_add", "shapes": [{"N": 64}, {"N": 256}]}),  # a sweep plot
]


def test_a_long_mixed_session_stops_growing(workspace):
    server = StdioServer(workspace)
    ids = itertools.count(1)
    try:
        server.initialize()

        def one_round() -> None:
            for tool, args in ROUND:
                rid = next(ids)
                server.call(rid, tool, args)
                answer = server.reply(rid, timeout_s=300)
                # an answer or a clean tool error, never a protocol error: the session goes on
                assert "result" in answer, (tool, answer)

        for _ in range(WARMUP_ROUNDS):
            one_round()
        marks: list[tuple[int, float]] = []  # (calls after the warm-up, RSS MB)

        def rounds(first: int, last: int) -> None:
            for r in range(first, last + 1):
                if r:
                    one_round()
                # the previous round's late histogram is drawn by now: list_kernels waits for it
                rid = next(ids)
                server.call(rid, "list_kernels", {})
                assert "result" in server.reply(rid)
                marks.append((r * len(ROUND), server.rss_mb()))

        rounds(0, ROUNDS)
        slope_kb = newest_half_slope_kb(marks)
        # The plotting calls' allocator moves RSS in 1-2 MB steps, up and down (measured per call
        # kind): two steps up in one half read ~20 KB/call. A leak keeps its rate in every
        # later window, steps do not: above the bound, the session goes on (at most twice
        # ROUNDS // 2 more rounds) and the newest half is fitted again.
        for _ in range(2):
            if slope_kb < SLOPE_BOUND_KB_PER_CALL:
                break
            done = len(marks) - 1
            rounds(done + 1, done + ROUNDS // 2)
            slope_kb = newest_half_slope_kb(marks)
    finally:
        server.close()
    shown = ", ".join(f"{c}: {r:.0f}" for c, r in marks)
    print(f"RSS MB after each round (calls: MB): {shown}; newest-half slope {slope_kb:.1f} KB/call")
    assert slope_kb < SLOPE_BOUND_KB_PER_CALL, (
        f"the server's RSS still grows {slope_kb:.1f} KB per call over the newest half of "
        f"{marks[-1][0]} calls (bound {SLOPE_BOUND_KB_PER_CALL}); MB after each round: "
        f"{shown}. bench/server_memory.py --heavy lists the heap's growers"
    )


def newest_half_slope_kb(marks: list[tuple[int, float]]) -> float:
    """Least-squares slope of RSS over the newest ROUNDS // 2 + 1 marks, KB per call."""
    late = marks[-(ROUNDS // 2 + 1) :]
    return statistics.linear_regression([c for c, _ in late], [r for _, r in late]).slope * 1024
