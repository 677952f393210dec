"""The starved-client task's plant: a busy neighbour on the load generator's CPU.

A load test is only as good as its client. When the load generator shares a CPU with something
busier (a batch job on the same node, a CPU-limited pod), it reads each token late: the TTFT
and TPOT it reports are its own waiting, while the engine's own histograms are unchanged. The
`serving.starved_client` task plants exactly that, for the length of the task:

    neighbour process   a Python busy loop pinned to one CPU (the last this process may use),
                        at normal priority
    load generators     every load-generator process the task's server starts (serve_benchmark
                        runs each repeat's client in a child, serving/loadgen/process.py) is
                        moved onto that CPU (and reniced, where the task says), so it gets
                        half that CPU or less whenever it has work

The engines (the server's other children) are left alone and run on the other CPUs. The
neighbour finds the generators itself, between its busy spells (every `poll_s`), so the scan
costs the server nothing; it prints each pid it pinned, which `BusyNeighbour` counts (a task
whose generators were never pinned was not planted, and its run says so).

It needs two CPUs or more (one for it, one for the engine); the runner holds it
(`infra-agent eval`), so `eval prepare`'s MCP sessions cannot plant it.

    python -m infra_agent.server.eval.neighbour --parent PID --cpu N [--nice 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass

# The generators' niceness beside the neighbour: 0 gets them half its CPU (CFS weights 1:1), 3
# about a third. Measured (load 7, 12 requests at once): at 0 they waited 47% of a run for a CPU
# and a repeat took 4 s; at +12, 103% and 45 s (a generator's setup slowed as much as its run).
NICE = 0
POLL_S = 0.02  # busy spell between two scans for new generators


class NeighbourError(ValueError):
    """The neighbour cannot be planted on this host; the message says why."""


@dataclass(frozen=True)
class Planted:
    """What the neighbour did during a task."""

    cpu: int
    nice: int
    pinned: int  # load-generator processes moved onto its CPU and reniced

    def describe(self) -> str:
        return (
            f"a busy neighbour on CPU {self.cpu} starved {self.pinned} load-generator "
            f"process(es) (pinned there at nice {self.nice:+d})"
        )


class BusyNeighbour:
    """`async with BusyNeighbour() as n:` the neighbour runs, pulling this process's load
    generators onto its CPU; `n.planted()` says what it did (after the block too)."""

    def __init__(self, parent: int | None = None, nice: int = NICE):
        self.parent = os.getpid() if parent is None else parent
        self.nice = nice
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            raise NeighbourError(
                f"the starved-client task needs 2 CPUs or more (this process may use {allowed}): "
                "one for the busy neighbour and its load generator, one for the engine; run "
                "it on a larger host, or leave it out (--tasks)"
            )
        self.cpu = allowed[-1]
        self._pinned: set[int] = set()
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None

    async def __aenter__(self) -> BusyNeighbour:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            __name__,
            "--parent",
            str(self.parent),
            "--cpu",
            str(self.cpu),
            "--nice",
            str(self.nice),
            stdout=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.ensure_future(self._read_pins())
        return self

    @property
    def pid(self) -> int | None:
        """The neighbour process' pid, once started."""
        return None if self._proc is None else self._proc.pid

    async def _read_pins(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        async for line in self._proc.stdout:
            if line.strip().isdigit():
                self._pinned.add(int(line))

    async def __aexit__(self, *exc) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
        if self._proc is not None:
            await self._proc.wait()
        if self._reader is not None:
            await self._reader

    def planted(self) -> Planted:
        return Planted(cpu=self.cpu, nice=self.nice, pinned=len(self._pinned))


def _neighbour(parent: int, cpu: int, nice: int) -> None:
    """The neighbour's body: busy on `cpu`, pinning `parent`'s load generators beside it."""
    from ...serving.loadgen.process import generator_pids

    os.sched_setaffinity(0, {cpu})
    pinned: set[int] = set()
    while os.getppid() == parent:  # ends with the runner, however that ends
        spell_end = time.monotonic() + POLL_S
        while time.monotonic() < spell_end:
            pass
        for pid in generator_pids(parent):
            if pid in pinned:
                continue
            try:  # every thread it has (Linux pins and renices threads); later ones inherit
                for thread in os.listdir(f"/proc/{pid}/task"):
                    os.sched_setaffinity(int(thread), {cpu})
                    os.setpriority(os.PRIO_PROCESS, int(thread), nice)
            except (ProcessLookupError, FileNotFoundError):
                continue  # ended before it could be pinned
            pinned.add(pid)
            print(pid, flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--cpu", type=int, required=True)
    parser.add_argument("--nice", type=int, default=NICE)
    options = parser.parse_args()
    _neighbour(options.parent, options.cpu, options.nice)
