"""How long `infra-agent report` takes over a big night: a ledger of real tool calls
(tests/server/report_ledger.py: numerics checks, a microbench A/B across an edit, a
compile) copied up to N rows, then the whole site written (index pages and one page per
experiment, code diffs included) a few times. Wall-clock, on this machine.

    python bench/report_generation.py [--rows 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "server")]  # the tests' night of real calls

from report_ledger import grow_ledger, make_night  # noqa: E402

from infra_agent.server.report import Filters, build_report  # noqa: E402


def main(rows: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        night = make_night(Path(tmp))
        state = Path(tmp) / "state"
        state.mkdir()
        shutil.copy(night.state_dir / "ledger.sqlite", state)
        shutil.copytree(night.state_dir / "blobs", state / "blobs")
        shutil.copytree(night.state_dir / "artifacts", state / "artifacts")
        total = grow_ledger(state / "ledger.sqlite", rows)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            written = build_report(state, Path(tmp) / "site", Filters())
            times.append(time.perf_counter() - started)
        size = sum(f.stat().st_size for f in (Path(tmp) / "site").rglob("*") if f.is_file())
        print(
            f"{total} rows -> {written.num_experiments} experiment pages + "
            f"{written.num_index_pages} index pages, {size / 1e6:.0f} MB"
        )
        print(
            f"generation: median {statistics.median(times):.1f} s, "
            f"min {min(times):.1f} s, max {max(times):.1f} s over {repeats} runs"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    main(args.rows, args.repeats)
