"""profile on a zoo kernel, and bad input: each a clear error within the job timeout, nothing left running."""

import asyncio
import os
from pathlib import Path

import pytest
from conftest import ToolCallError, call
from profile_server import profile_client, profile_server, profile_workspace  # noqa: F401

pytestmark = pytest.mark.anyio

SPANS = """
from ia_worker.ranges import span

def step():
    with span("dispatch"):
        sum(range(1000))
    with span("kv_transfer"):
        bytes(1000)
"""
TWO_THREADS = """
import threading
import torch

def step():
    def side():
        with torch.profiler.record_function("side_range"):
            torch.ones(64, 64).sum()
    t = threading.Thread(target=side, name="side-0")
    t.start()
    t.join()
    torch.zeros(8).add(1)
"""
HANG = """
import threading, time

def step():
    threading.Thread(target=time.sleep, args=(300,), name="stuck").start()
    time.sleep(300)
"""
FORK = """
import os, time

def step():
    if os.fork() == 0:
        time.sleep(300)  # a child that outlives the step
"""


async def test_zoo_kernel_top_ops_are_the_references_ops(profile_client):
    out = await call(
        profile_client,
        "profile",
        kernel="rmsnorm",
        impl="reference",
        shape={"M": 64, "N": 256},
        calls=5,
        top_k=12,
        sample_threads=False,
    )
    by_self = {row["name"]: row for row in out["top_ops_by_self"]}
    assert {"aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"} <= set(by_self)
    muls = [
        row for row in out["top_ops_by_self"] if row["name"] == "aten::mul"
    ]  # x * rstd, then * weight:
    assert (
        sorted(row["count"] for row in muls) == [5, 5]
        and len({row["input_shapes"] for row in muls}) == 2
    )
    assert by_self["aten::pow"]["count"] == 5  # grouped by input shapes, counted per call
    assert "[64, 256]" in by_self["aten::pow"]["input_shapes"]
    top_total = out["top_ops_by_total"][0]
    assert top_total["total_ms"] >= max(row["self_ms"] for row in out["top_ops_by_self"])
    assert out["ranges"][0]["name"] == "call" and out["ranges"][0]["count"] == 5
    assert out["contention"] is None and "CPU ops only" in out["gpu_note"]
    assert out["target"].startswith("kernel rmsnorm (reference")


async def test_record_function_ranges_and_ops_of_a_second_thread_are_recorded(profile_client):
    out = await call(
        profile_client, "profile", source=TWO_THREADS, entry="step", sample_threads=False
    )
    (side,) = [r for r in out["ranges"] if r["name"] == "side_range"]
    assert (
        side["source"] == "record_function"
        and side["count"] == 1
        and side["threads"][0].startswith("side-0")
    )
    assert len(out["ops_threads"]) == 2  # torch ops from the entry's thread and from side-0
    names = {row["name"] for row in out["top_ops_by_total"]}
    assert {"aten::ones", "aten::sum", "aten::add"} <= names


async def test_an_entry_that_does_not_exist_lists_what_the_file_defines(profile_client):
    with pytest.raises(ToolCallError, match="has no function 'nope'.*copy_episode.*episode"):
        await call(profile_client, "profile", path="episode.py", entry="nope", sample_threads=False)


async def test_a_range_never_seen_lists_the_ranges_that_ran(profile_client):
    with pytest.raises(
        ToolCallError,
        match="'prefill' matches no range that ran; ranges seen: dispatch, kv_transfer",
    ):
        await call(
            profile_client,
            "profile",
            source=SPANS,
            entry="step",
            overlap=[["prefill", "dispatch"]],
            sample_threads=False,
        )
    with pytest.raises(ToolCallError, match="ranges seen: dispatch, kv_transfer"):
        await call(
            profile_client,
            "profile",
            source=SPANS,
            entry="step",
            ranges=["decode"],
            sample_threads=False,
        )
    with pytest.raises(
        ToolCallError, match="overlap_fraction: 'decode' matches no range.*ranges seen: dispatch"
    ):
        await call(
            profile_client,
            "profile",
            source=SPANS,
            entry="step",
            sample_threads=False,
            expect=["overlap_fraction('decode', 'dispatch') >= 0.5"],
        )
    with pytest.raises(ToolCallError, match="overlap_fraction takes two range sets"):
        await call(
            profile_client,
            "profile",
            source=SPANS,
            entry="step",
            sample_threads=False,
            expect=["overlap_fraction('dispatch') >= 0.5"],
        )


async def test_a_hanging_workload_is_killed_at_the_timeout_with_its_samplers(
    profile_client, profile_server
):
    with pytest.raises(ToolCallError, match="did not return within timeout_s=3 s.*killed"):
        await call(profile_client, "profile", source=HANG, entry="step", timeout_s=3)
    await _nothing_left_running(profile_server)


async def test_a_workload_that_forks_is_refused_and_its_child_killed(
    profile_client, profile_server
):
    with pytest.raises(
        ToolCallError, match="started child processes.*profile measures one process"
    ):
        await call(profile_client, "profile", source=FORK, entry="step", sample_threads=False)
    await _nothing_left_running(profile_server)


async def test_a_serve_handle_must_name_a_running_engine(profile_client):
    """The handle target itself is exercised in tests/serving/tools/test_serve_builtin.py."""
    with pytest.raises(ToolCallError, match="no serving engine with handle 'serve-1'"):
        await call(profile_client, "profile", handle="serve-1", duration_s=5)
    with pytest.raises(ToolCallError, match="duration_s applies to handle="):
        await call(profile_client, "profile", kernel="rmsnorm", duration_s=5)
    with pytest.raises(ToolCallError, match="give a target"):
        await call(profile_client, "profile")


async def _nothing_left_running(server) -> None:
    """No py-spy left, and the zygote's only child is the spare it forks ahead of the next job."""
    for _ in range(50):
        spies = [p for p in Path("/proc").glob("[0-9]*") if b"py-spy\x00record" in _cmdline(p)]
        children = [c for z in _zygotes(server) for c in _children(z)]
        if not spies and len(children) <= 1:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"still running: py-spy {spies}, zygote children {children}")


def _zygotes(server) -> list[int]:
    return [
        p
        for p in server.state.sandbox.zygote_pids()
        if b"ia_worker.zygote" in _cmdline(Path(f"/proc/{p}"))
        and b"ia_worker.zygote" not in _cmdline(Path(f"/proc/{_parent(p)}"))
    ]


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except OSError:
            pass
    return out


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return 0


def _cmdline(path: Path) -> bytes:
    try:
        return (path / "cmdline").read_bytes()
    except OSError:
        return b""


assert os.name == "posix"
