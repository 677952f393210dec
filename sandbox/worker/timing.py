"""The timing side of the microbench op: one timed arm (its calls, samples and the
reservoir of spot-checked outputs) and the clocks (CPU perf counter; CUDA events with an
L2 flush and a whole-device synchronise). Imported by ops/microbench.py, so the clock is
captured before any candidate code is loaded.
"""

from __future__ import annotations

import random
import time

import torch

from .context import JobContext
from .protocol import spot_check_file

now_ns = time.perf_counter_ns  # captured at import, before any candidate code


class Arm:
    """One timed implementation: its samples, its page faults, and the reservoir of outputs
    the parent spot-checks."""

    def __init__(self, name: str, fn, num_spot_checks: int):
        self.name = name
        self.fn = fn
        self.samples: list[int] = []
        self.calls = 0
        self.minor_faults = 0  # page faults during timed calls: touching fresh (unmapped) pages
        self.graphs = None  # per input set: (CUDAGraph, static outputs) when replaying
        self._k = num_spot_checks
        self._seen = 0  # timed calls offered to the reservoir
        self._reservoir: list[dict] = []

    def call(self, timer, sets, index: int):
        self.calls += 1
        try:
            if self.graphs is not None:
                graph, outputs = self.graphs[index]
                elapsed, _ = timer.time(graph.replay, ())
                return elapsed, outputs
            elapsed, out = timer.time(self.fn, sets[index])
        except Exception as exc:
            raise RuntimeError(
                f"{self.name} raised on call {self.calls} (input set {index}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return elapsed, as_tensors(out, self.name)

    def offer(self, rng: random.Random, iteration: int, index: int, outputs) -> None:
        """Reservoir sampling: every timed call is equally likely to end up checked."""
        self._seen += 1
        slot = len(self._reservoir) if len(self._reservoir) < self._k else rng.randrange(self._seen)
        if slot < self._k:
            entry = {
                "iteration": iteration,
                "input_set": index,
                "outputs": [t.detach().clone() for t in outputs],
            }
            if slot == len(self._reservoir):
                self._reservoir.append(entry)
            else:
                self._reservoir[slot] = entry

    def save_spot_checks(self, ctx: JobContext) -> list[dict]:
        from .tensors import save_tensors

        saved = []
        for k, entry in enumerate(self._reservoir):
            name = spot_check_file(self.name, k)
            save_tensors(ctx.out_dir / name, {str(i): t for i, t in enumerate(entry["outputs"])})
            saved.append(
                {
                    "arm": self.name,
                    "iteration": entry["iteration"],
                    "input_set": entry["input_set"],
                    "file": name,
                }
            )
        return saved

    def capture_graphs(self, torch, sets) -> None:
        self.graphs = []
        side = torch.cuda.Stream()
        for inputs in sets:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture stream, as torch advises
                self.fn(*inputs)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    out = self.fn(*inputs)
            except Exception as exc:
                raise RuntimeError(
                    f"{self.name} cannot be captured in a CUDA graph (host syncs, "
                    f"allocations that vary, CPU work?): {type(exc).__name__}: {exc}"
                ) from exc
            self.graphs.append((graph, as_tensors(out, self.name)))


def as_tensors(out, name: str) -> list:
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    if not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise TypeError(
            f"{name} returned {type(out).__name__}; return a tensor or a tuple of tensors"
        )
    return items


class CpuTimer:
    description = "time.perf_counter_ns around each call (CPU)"

    def time(self, fn, args):
        t0 = now_ns()
        out = fn(*args)
        t1 = now_ns()
        return t1 - t0, out


class CudaTimer:
    """Device events; the L2 flushed before, the whole device synchronised inside."""

    def __init__(self, torch, flush_bytes: int | None):
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        size = int(flush_bytes or max(2 * l2, 256 << 20))
        self._flush = torch.empty(size, dtype=torch.int8, device="cuda")
        self._event = torch.cuda.Event
        self._sync = torch.cuda.synchronize
        self.description = (
            f"CUDA events, {size >> 20} MiB L2 flush before each call, "
            "torch.cuda.synchronize() before the end event"
        )

    def time(self, fn, args):
        start, end = self._event(enable_timing=True), self._event(enable_timing=True)
        self._flush.zero_()
        start.record()
        out = fn(*args)
        self._sync()  # the whole device: work on side streams is counted
        end.record()
        end.synchronize()
        return int(start.elapsed_time(end) * 1e6), out
