"""What the MCP server keeps over a long session: a scripted in-process session (the fuzzer's
kinds of call: listings, kernel calls, failing serve calls, odd expect strings, bad arguments)
with tracemalloc snapshots, the heap's top growers (by allocation site) between the first
snapshot after warm-up and the last, and the process's RSS (issue 36, item 6).

    python bench/server_memory.py [--calls 1200] [--top 15] [--heavy] [--fuzz] [--before REV]

--fuzz runs tests/server/test_fuzz_tools.py's fuzzer instead (its schema draws, broken arguments
and edges for every tool: 526 calls a round, the same draws each round) against a server
process (HTTP on loopback), and reads that process's RSS from /proc after each tool's calls;
the first round is the warm-up.

--before REV runs the session twice, each in a process of its own: on REV's code (`git archive`)
and on this tree, one after the other, and prints each side's RSS slope (least squares over the
marks after the warm-up, KB per call) and their ratio.

Both sides of a fix are measured by running this on each (the growth per call is the number to
compare; a bounded server's heap stops growing after the warm-up).

Measured 2026-12-06 on the 2-core host (other helpers' tests beside it):
- light (listings, clean errors, a /bin/false engine), 270 calls: traced heap +0.07 MB, RSS 108 ->
  111 MB, flat;
- --heavy (adds compile_kernel, check_numerics, microbench, profile on vector_add), 202 calls:
  traced heap +4.08 MB (3.75 MB of it one block, pathlib's interned path parts from
  sandbox/outcome.py's sanitize_tree walk, a dict that grew once; the rest matplotlib's font
  and mathtext caches, bounded LRUs); RSS 361 -> 442 MB. The RSS growth is native, not the
  Python heap. (An earlier reading, "check_numerics alone grows ~3.5 MB a call", was its
  warm-up: matplotlib's import and first fonts: check_numerics alone, today's tree, 387 MB after
  its first call, 410 after its third, 416 after its 40th.)

The cause: matplotlib caches its FreeType fonts per thread (font_manager.get_font keys its LRU
of 64 on threading.get_ident()), and mathtext's parse cache (50) holds fonts too. microbench,
profile and serve_benchmark drew their PNGs on whichever anyio/asyncio worker was free (those
threads come and go), check_numerics on the late-artifact thread: every new drawing thread
loaded a new set of fonts, about 0.8 MB of native memory each. Witnesses: in the --heavy run,
tracemalloc's growers include font_manager.py:1753/1757 (get_font's misses, +30 over 112
calls); in a plain process, check_numerics' histogram drawn 120 times, each on a fresh thread
while 0-29 others are alive (so the ids differ): RSS 104 -> 144 MB, get_font's cache 4 -> 56
entries (28 thread ids); on fresh threads that reuse one id: 104 -> 115 MB, 4 entries. The fix
(tools/common/plot_thread.py): every plot draws on one long-lived thread. After it, the
--heavy run's growers no longer include get_font.

Before/after, one run (`--heavy --calls 200 --before 0f03b90`, 2026-12-06, the lead's test suite
running beside it): get_font misses over the 162 measured calls +50 before, none after; RSS 410
-> 471 MB before, 411 -> 454 MB after; RSS slope over the measured calls 339 vs 236 KB per call,
over their second half (calls 122-200) 102 vs 55 KB per call (1.9x less; after: 453 -> 454 MB
over calls 134-200). What still grows once: ~27-34 MB on both sides at the first heavy round
after the warm-up (calls 50-62), and the 3.75 MB pathlib block.

What is left after the fix (`--heavy --calls 160`, 2026-12-06, loaded host): the traced Python
heap grows 3.86 MB over 122 measured calls, 3.75 MB of it one block at its first check_numerics
(tools/check_numerics/jobs.py:101, pathlib's interned path parts: the interning table's one
resize, count +1), the rest tens of KB in matplotlib's bounded mathtext and font caches; no
allocation site of ours grows with the calls. RSS: 352 -> 384 MB at the first heavy round (one
time), then 2 MB steps that come further apart (384 at call 58, 389 at 98, 396 at 160): native
memory (the allocator's arenas, Agg's buffers), not a Python object. Over a longer session it
levels off: tests/server/test_session_memory.py's server held 389-390 MB from call 204 to 408.
(Not checked: whether malloc_trim gives those steps back.)

The fuzz session (`--fuzz --calls 2200 --before 0f03b90`, 2026-12-06, one run, other helpers'
suites beside it, load 13-23): 2630 calls a side, 0 answers not clean; the server's RSS 109 ->
111 MB before, 109 -> 112 MB after; slope after the first round 0.8 vs 0.8 KB per call, over
the second half 0.0 on both: flat on both sides. The fuzzer's draws never make the server load
torch or matplotlib (measuring and serving calls are pinned to cheap paths or refused), so
issue 36's 352 -> 601 MB over 3,672 fuzz calls (a process that had loaded them: 352 MB at its
start) is not reproduced by the fuzzer alone; with plotting calls in the mix it is the font
leak above: tests/server/test_session_memory.py (a server process, 408 calls after a warm-up,
check_numerics and microbench in every round of 17) read 55.2 KB per call over its second half
on 0f03b90 (351 -> 398 MB) and 7.2 on this tree (354 -> 390 MB, flat but for one 5 MB step).

Per call kind (2026-12-06, each kind alone on a fresh stdio server: 20 warm-up calls, then 200,
RSS every 20; other helpers' tests beside it, load 11-14): flat (under 2.5 KB per call) for
list_serves, stop_serve, serve_benchmark/profile/compare_experiments on unknown handles, the odd
`expect` strings, bad arguments, a bad check_numerics source, and launch_serve of /bin/false
(100.5 -> 100.9 MB: the 256 stopped-engine records are small). list_kernels 9.9, describe_kernel
10.8, device_info 6.1, list_experiments 4.0 KB per call: SQLite's page cache of the ledger
filling (default 2000 KiB; list_kernels x800: +2.0 MB over 240 calls, then flat); capped at
256 KiB since (server/ledger.py CACHE_KIB; list_kernels x400: 98.6 -> 98.7 MB).
check_numerics on vector_add, x60 after 6: 350 -> 377 MB at its first calls (torch,
matplotlib), then 377 -> 384 MB over 54 calls in 1-2 MB steps up and down (381.5, 381.1, 381.9,
382.4, 381.4, 381.6, 384.0); microbench (two shapes, a sweep plot), x60 after 6: 335 -> 356 MB
at its first calls, then 356 -> 361 MB over 54 (356.8 ... 359.0, 360.9 at the last mark):
native memory in 1-2 MB steps, not yet explained (tracemalloc inside the server not yet run).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))
from loop_latency import _extract  # noqa: E402  (git archive REV as an importable infra_agent)
from mcp_session import zoo_session  # noqa: E402
from session_calls import CHEAP_CALLS  # noqa: E402  (tests/: one list for test and bench)
from stdio_server import rss_mb  # noqa: E402

# One round of calls, cheap and deterministic; each kind the fuzzer makes (answers and clean errors)
ROUND = CHEAP_CALLS  # the memory test's session without its two plotting calls
# --heavy adds calls that run work (a compile, a numerics check, a microbench, a kernel profile)
HEAVY: list[tuple[str, dict]] = [
    ("compile_kernel", {"kernel": "vector_add"}),
    ("check_numerics", {"kernel": "vector_add"}),
    ("microbench", {"kernel": "vector_add"}),
    ("profile", {"kernel": "vector_add"}),
]


FLAT_KB_PER_CALL = 1.0  # a slope under this is noise of the allocator (RSS moves in 4 KB pages)


async def session(calls: int, top: int, heavy: bool) -> None:
    script = ROUND + HEAVY if heavy else ROUND
    async with zoo_session("ia-mem-") as client:
        done = 0

        async def some(n: int) -> None:
            nonlocal done
            for i in range(n):
                tool, args = script[(done + i) % len(script)]
                await client.call_tool(tool, args)
            done += n

        await some(2 * len(script))  # warm-up: imports, caches filled once, the ledger opened
        gc.collect()
        tracemalloc.start(8)
        first, rss_first, t0 = tracemalloc.take_snapshot(), rss_mb(), time.monotonic()
        heap_first = tracemalloc.get_traced_memory()[0]  # 0: what the warm-up left is not traced
        marks = [(done, heap_first / 2**20, rss_first)]
        step = max(calls // 16, 1)
        while done < calls:
            await some(min(step, calls - done))
            gc.collect()
            marks.append((done, tracemalloc.get_traced_memory()[0] / 2**20, rss_mb()))
        last = tracemalloc.take_snapshot()
        heap_last = tracemalloc.get_traced_memory()[0]
        print(f"{done} calls in {time.monotonic() - t0:.0f} s")
        print(
            "calls, traced heap MB, RSS MB:",
            ", ".join(f"({c}, {h:.2f}, {r:.0f})" for c, h, r in marks),
        )
        growth = (heap_last - heap_first) / 1024
        measured = done - 2 * len(script)
        print(
            f"traced heap {heap_first / 2**20:.2f} -> {heap_last / 2**20:.2f} MB "
            f"({growth / measured:.2f} KB per call over {measured} calls); "
            f"RSS {rss_first:.0f} -> {rss_mb():.0f} MB"
        )
        print(f"top {top} growers (allocation site, size diff, count diff):")
        for stat in last.compare_to(first, "traceback")[:top]:
            frames = [
                f for f in stat.traceback if "infra_agent" in f.filename or "/wt/" in f.filename
            ]
            where = frames[-1] if frames else stat.traceback[-1]
            print(
                f"  {stat.size_diff / 1024:+9.1f} KB {stat.count_diff:+7d}  "
                f"{where.filename.split('site-packages/')[-1]}:{where.lineno}"
                f"  (at {stat.traceback[-1].filename.split('site-packages/')[-1]}:{stat.traceback[-1].lineno})"
            )
        tracemalloc.stop()
        slope = _slope([(c, r) for c, _, r in marks])
        late = _slope([(c, r) for c, _, r in marks[len(marks) // 2 :]])
        print(f"RSS slope after the warm-up: {slope:.1f} KB per call; second half: {late:.1f}")
        print(
            "json:",
            json.dumps({"rss_slope_kb_per_call": slope, "late_slope": late, "marks": marks}),
        )


def fuzz_session(calls: int) -> None:
    """tests/server/test_fuzz_tools.py's fuzzer (schema draws, broken arguments, edges for every
    tool, the same derandomized draws each round), round after round until `calls`, against a
    server process (HTTP on loopback, a fresh copy of the zoo); that process's RSS from /proc
    after each tool's draws. The first round is the warm-up."""
    import shutil
    from collections import Counter

    import anyio.from_thread
    import httpx
    from hypothesis_jsonschema import from_schema
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from infra_agent.kernels.workspace import EMBEDDED_ROOT
    from infra_agent.sandbox import free_port

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "server"))
    import test_fuzz_tools as fuzz

    with tempfile.TemporaryDirectory(prefix="ia-mem-fuzz-") as tmp:
        ws = Path(tmp) / "ws"
        shutil.copytree(EMBEDDED_ROOT, ws, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k != "INFRA_AGENT_TOKEN"}
        argv = [sys.executable, "-m", "infra_agent.server", "--http", "--port", str(port)]
        with open(Path(tmp) / "server.log", "wb") as log:
            proc = subprocess.Popen(
                [*argv, "--workspace", str(ws)], stdout=log, stderr=log, env=env
            )
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            for _ in range(600):
                try:
                    httpx.get(url, timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.2)
            tally: Counter = Counter()
            bad: list = []
            marks: list[tuple[int, float]] = []  # (calls, the server's RSS MB)
            t0 = time.monotonic()
            with anyio.from_thread.start_blocking_portal() as portal:
                client_cm = Client(streamable_http_client(url))
                with portal.wrap_async_context_manager(client_cm) as client:
                    tools = sorted(portal.call(client.list_tools).tools, key=lambda t: t.name)
                    rounds = 0
                    while sum(v for (_, k), v in tally.items() if k == "calls") < calls:
                        for tool in tools:
                            schema = tool.input_schema
                            n = fuzz.EXAMPLES_PER_TOOL
                            strategy = from_schema(schema)
                            fuzz._fuzz(portal, client, tool, strategy, n, tally, bad)
                            broken = fuzz._broken(schema)
                            fuzz._fuzz(
                                portal, client, tool, broken, fuzz.BROKEN_PER_TOOL, tally, bad
                            )
                            for arguments in fuzz._edges(tool):
                                arguments = {**fuzz.PINNED.get(tool.name, {}), **arguments}
                                result = portal.call(fuzz._call, client, tool.name, arguments)
                                fuzz._record(tool, arguments, result, tally, bad)
                            if rounds:  # after the warm-up round
                                done = sum(v for (_, k), v in tally.items() if k == "calls")
                                marks.append((done, rss_mb(proc.pid)))
                        rounds += 1
                        done = sum(v for (_, k), v in tally.items() if k == "calls")
                        print(
                            f"round {rounds}: {done} calls, RSS {rss_mb(proc.pid):.0f} MB"
                            f" ({time.monotonic() - t0:.0f} s)",
                            flush=True,
                        )
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(
        f"{done} fuzz calls in {rounds} rounds, {time.monotonic() - t0:.0f} s; not clean: {len(bad)}"
    )
    print("calls, server RSS MB:", ", ".join(f"({c}, {r:.0f})" for c, r in marks))
    slope = _slope(marks)
    late = _slope(marks[len(marks) // 2 :])
    print(
        f"server RSS {marks[0][1]:.0f} -> {marks[-1][1]:.0f} MB over calls {marks[0][0]}-{done}; "
        f"slope {slope:.1f} KB per call; second half: {late:.1f}"
    )
    print(
        "json:",
        json.dumps({"rss_slope_kb_per_call": slope, "late_slope": late, "marks": marks}),
    )


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of RSS (MB) over calls, in KB per call."""
    n = len(points)
    mx, my = sum(c for c, _ in points) / n, sum(r for _, r in points) / n
    den = sum((c - mx) ** 2 for c, _ in points) or 1.0
    return 1024 * sum((c - mx) * (r - my) for c, r in points) / den


def before_and_after(rev: str, argv: list[str]) -> None:
    """The same session on `rev`'s code and on this tree, one process each; the slopes' ratio."""
    slopes = {}
    with tempfile.TemporaryDirectory(prefix="ia-mem-before-") as tmp:
        sides = {f"before ({rev})": str(_extract(rev, Path(tmp))), "after (this tree)": None}
        for side, pythonpath in sides.items():
            env = dict(os.environ)
            if pythonpath is not None:  # found before the editable install of this tree
                env["PYTHONPATH"] = pythonpath
            out = subprocess.run(
                [sys.executable, __file__, *argv], env=env, capture_output=True, text=True
            ).stdout
            print(f"== {side}\n{out}", flush=True)
            found = re.search(r"^json: (.*)$", out, re.M)
            if found is None:
                raise SystemExit(f"the {side} session printed no result; run it alone to see why")
            got = json.loads(found.group(1))
            slopes[side] = (got["rss_slope_kb_per_call"], got["late_slope"])
    for i, what in enumerate(("after the warm-up", "second half")):
        before, after = (s[i] for s in slopes.values())
        if after >= FLAT_KB_PER_CALL:
            ratio = f" ({before / after:.1f}x less)"
        else:
            ratio = " (after: flat)" if before >= FLAT_KB_PER_CALL else " (both flat)"
        print(f"RSS slope {what}: before {before:.1f} KB/call, after {after:.1f} KB/call{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1200)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--heavy", action="store_true", help="add calls that run work")
    parser.add_argument("--before", help="git revision to compare with (one process each)")
    parser.add_argument(
        "--fuzz",
        action="store_true",
        help="tests/server/test_fuzz_tools.py's fuzzer against a server process, --calls of it",
    )
    args = parser.parse_args()
    if args.before:
        argv = [a for a in sys.argv[1:] if a not in ("--before", args.before)]
        before_and_after(args.before, argv)
        return
    if args.fuzz:
        fuzz_session(args.calls)
        return
    asyncio.run(session(args.calls, args.top, args.heavy))


if __name__ == "__main__":
    main()
