"""profile's numbers within physical bounds, range patterns that cannot backtrack, the shapes alias,
the shortest window, and an interpreted Triton kernel's time made visible (issues 20, 21, 27)."""

import time

import pytest
from conftest import ToolCallError, call
from profile_server import profile_client, profile_server, profile_workspace  # noqa: F401

# serial: two samplers' shares of one window, and py-spy's attach before it, on this host's cores
pytestmark = [pytest.mark.anyio, pytest.mark.serial]

# A Python-busy thread beside a main thread issuing tens of thousands of tiny torch ops: the window
# is ~0.4 s, and closing it (torch.profiler's post-processing and export of those ops) holds the GIL
# for longer than that. Samplers that run on through the export count it as the window's.
BUSY = """
import threading, time, torch

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def step():
    t = threading.Thread(target=spin, args=(0.4,), name="spinner")
    t.start()
    a = torch.ones(4)
    end = time.perf_counter() + 0.4
    while time.perf_counter() < end:
        a.add_(1)
    t.join()
"""
TICK_MS = 10  # /proc's on-CPU counters move in 10 ms ticks (USER_HZ 100)


# Two samplers (py-spy for the GIL, /proc for the states) each see the 0.4 s spin ~80 times (200 Hz):
# a share near 0.9 has a standard error of ~0.034 in each, ~0.05 in their difference; three of
# those (0.15) bound the honest difference.
# CI read 1.0 against 0.898 (running + cpu_wait) once: 0.1 was too tight.
SAMPLING_ERROR = 0.15


async def test_thread_on_cpu_and_gil_shares_stay_within_the_window(profile_client):
    out = await call(profile_client, "profile", source=BUSY, entry="step", gil_sample_hz=200)
    window = out["window_ms"]
    sampled = [t for t in out["threads"] if t["on_cpu_ms"] is not None]
    assert sampled and out["contention"]["gil_sampler"].startswith("py-spy"), out["contention"]
    for (
        t
    ) in sampled:  # a thread is on a CPU at most for the whole window (plus one tick at each end)
        assert t["on_cpu_ms"] <= window + 2 * TICK_MS, (t, window)
    shares = [t["gil_held_fraction"] or 0 for t in out["threads"]]
    assert sum(shares) <= 1.1, (
        shares,
        out["threads"],
    )  # one holder at a time, within sampling error
    spinner = next(t for t in out["threads"] if t["name"] == "spinner")
    # a pure-Python spinner holds the GIL only while it runs or waits for a CPU (preempted holding it),
    # never while asleep on a futex (waiting for the GIL): py-spy's share within the /proc states' share
    states = spinner["state_fractions"]
    assert spinner["on_cpu_ms"] > 0, spinner
    assert (
        spinner["gil_held_fraction"]
        <= states.get("running", 0) + states.get("cpu_wait", 0) + SAMPLING_ERROR
    ), spinner
    assert set(out["phases_ms"]) >= {"job", "judge"}


SPANS = """
from ia_worker.ranges import span

def step():
    with span("a" * 27 + "!"):
        sum(range(1000))
    with span("kv_transfer"):
        bytes(1000)
    with span("dispatch"):
        bytes(1000)
"""


async def test_range_sets_are_names_and_wildcards_and_regex_syntax_is_refused_at_once(
    profile_client,
):
    started = time.monotonic()
    with pytest.raises(ToolCallError, match="regular-expression syntax"):
        await call(
            profile_client,
            "profile",
            source=SPANS,
            entry="step",
            ranges=["(a+)+"],
            sample_threads=False,
        )
    assert (
        time.monotonic() - started < 60
    )  # refused before the job; a backtracking match would take minutes
    out = await call(
        profile_client,
        "profile",
        source=SPANS,
        entry="step",
        ranges=["kv_*", "a*!"],
        overlap=[["kv_transfer", "dispatch|a*"]],
        sample_threads=False,
    )
    assert {r["name"] for r in out["ranges"]} == {"kv_transfer", "a" * 27 + "!"}
    assert out["overlaps"][0]["b_in_ranges_ms"] > 0


async def test_shapes_is_read_as_shape_with_a_note(profile_client):
    out = await call(
        profile_client,
        "profile",
        kernel="rmsnorm",
        impl="reference",
        shapes=[{"M": 8, "N": 64}],
        calls=2,
        sample_threads=False,
    )
    assert "{'M': 8, 'N': 64}" in out["target"] and "float32" in out["summary"]
    assert any("shapes" in n for n in out["notes"])
    with pytest.raises(ToolCallError, match="profile runs one shape"):
        await call(
            profile_client,
            "profile",
            kernel="rmsnorm",
            shapes=[{"M": 8, "N": 64}, {"M": 4, "N": 64}],
        )


async def test_a_window_too_short_for_one_sample_is_refused_with_the_minimum(profile_client):
    with pytest.raises(ToolCallError, match="greater than or equal to 0.1"):
        await call(profile_client, "profile", handle="serve-none", duration_s=5e-324)


async def test_interpreted_triton_time_is_named_and_shown_as_python_stacks(profile_client):
    # py-spy attaches 0.2-0.55 s before the window here (the job waits 0.6 s); one that attached
    # late on a busy host sampled too little of it: the finding comes from the op table alone and
    # says so, and the stacks are asked of another try. 60 calls at 500 Hz: 20 calls at 200 Hz
    # took 27 ms on a fast host, room for 5 samples where the share needs 10, every try
    for _ in range(3):
        out = await call(
            profile_client,
            "profile",
            kernel="vector_add",
            impl="triton",
            calls=60,
            gil_sample_hz=500,
        )
        (finding,) = [f for f in out["findings"] if f["code"] == "interpreted_triton"]
        assert (
            "invisible to torch.profiler" in finding["message"]
            and "invisible to torch.profiler" in out["summary"]
        )
        if "too few samples" not in finding["message"]:
            break
    else:
        pytest.fail(f"py-spy sampled too little of the window in 3 tries: {finding['message']}")
    assert any("triton/runtime/interpreter" in s["stack"] for s in out["python_stacks"]), out[
        "python_stacks"
    ]
    # where the time went, by py-spy, is far more of the window than the op table covers
    ops_ms = sum(o["self_ms"] for o in out["top_ops_by_self"])
    in_interp = (
        sum(s["share"] for s in out["python_stacks"] if "triton" in s["stack"]) * out["window_ms"]
    )
    assert in_interp > 2 * ops_ms, (in_interp, ops_ms)
