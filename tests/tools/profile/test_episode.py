"""The second episode replayed on CPU with the real mechanism, through MCP.

A compute thread (prefill-0) calls a native wait (fixtures/native_wait.c, 20 ms) in a loop
inside `dispatch`; a transfer thread (kv-0) copies KV blocks in a Python loop inside
`kv_transfer`. Through ctypes.PyDLL the GIL stays held across the native call; through
ctypes.CDLL it is released. Measured on this machine (2 cores shared with ~8 agents, load
average 6-8), six runs each of the current code:

- PyDLL: `dispatch` overlapped `kv_transfer` 1.4-2.5% of its ~840 ms running time, and
  `kv_transfer` overlapped `dispatch` 11-12% of its 140-185 ms (of a ~1.2 s window); kv-0 sat
  blocked on a futex 72-83% of its kv_transfer time while prefill-0 was sampled holding the
  GIL 65-82% of the window, at the native call's line: finding gil_contention; expect
  `overlap_fraction('kv_transfer', 'dispatch') >= 0.5` contradicted.
- CDLL: `kv_transfer` overlapped `dispatch` 65-81% of its running time; no finding; expect
  supported.
- The raw wall intervals overlap 99.5-99.8% in both: a thread waiting for the GIL inside a
  range still has it open, which is why overlap is judged on running time.

A second pair: prefill-0 runs pure Python inside `dispatch` while kv-0 copies the blocks as a
pure Python loop, or as one torch call (which releases the GIL). Measured, four runs: Python
loop: kv-0 sampled holding the GIL 37-51% of the window (at _copy_blocks_python), prefill-0
blocked on a futex 43-55% of dispatch; torch call: kv-0 holds the GIL 1-10% (its copy runs
in C++), prefill-0 blocked 2-30%. Both threads need a CPU here, so on this overloaded host
their running overlap is low either way (5-23%) and the findings vary between runs; what the
test asserts is who holds the GIL, as kv-0's share of the samples in which either thread held it
(three runs on a quiet host: 0.44-0.50 for the Python loop, 0 for the torch call). The share of
the window alone fell to 0.19 once in CI (a sampler short of CPU records fewer samples than its
rate, and every share shrinks with it); the ratio does not depend on the undercount.
"""

import base64
import io
import json

import pytest
from conftest import call
from profile_server import profile_client, profile_server, profile_workspace  # noqa: F401

pytestmark = pytest.mark.anyio

EXPECT = ["overlap_fraction('kv_transfer', 'dispatch') >= 0.5"]
PAIR = [["kv_transfer", "dispatch"]]


def _shows_the_mechanism(mode: str, out: dict) -> bool:
    """Whether the host's samples resolved the run (a 2-core CI box under load can starve the sampler)."""
    fraction = out["overlaps"][0]["b_overlap_fraction" if mode == "pydll" else "a_overlap_fraction"]
    return fraction is not None and (fraction < 0.1 if mode == "pydll" else fraction >= 0.5)


@pytest.fixture(scope="module")
async def episodes(profile_client):
    """One profile per mode; a run the host's sampler could not resolve is measured once more (the
    tests then assert on the second run), so one starved sampling window does not fail the suite."""
    runs = {}
    for mode in ("pydll", "cdll"):
        for _ in range(2):
            runs[mode] = await call(
                profile_client,
                "profile",
                path="episode.py",
                entry="episode",
                workload_args=[mode],
                overlap=PAIR,
                expect=EXPECT,
                hypothesis="the native call holds the GIL",
            )
            if _shows_the_mechanism(mode, runs[mode]):
                break
    return runs


async def test_gil_held_in_the_native_call_means_no_overlap_and_a_gil_finding(episodes):
    out = episodes["pydll"]
    overlap = out["overlaps"][0]
    assert overlap["basis"] == "running" and overlap["b_overlap_fraction"] < 0.1
    assert (
        overlap["interval_a_overlap_fraction"] > 0.9
    )  # the wall intervals alone would say "overlapped"
    assert out["finding_codes"] == ["gil_contention"]
    finding = out["findings"][0]
    assert (
        finding["layer"] == "python/GIL"
        and "prefill-0" in finding["message"]
        and "kv-0" in finding["message"]
    )
    assert "episode.py" in finding["message"]  # where the holder held it: the native call's line
    assert (
        "Py_BEGIN_ALLOW_THREADS" in finding["next_experiment"]
        and "overlap_fraction" in finding["next_experiment"]
    )
    wait = next(w for w in out["contention"]["waits"] if w["waiter"].startswith("kv-0"))
    assert wait["fraction"] > 0.3 and wait["holder_gil_share"] > 0.3
    assert out["hypothesis_answer"]["answer"] == "contradicted"


async def test_gil_released_in_the_native_call_means_overlap_and_no_finding(episodes):
    out = episodes["cdll"]
    assert out["overlaps"][0]["a_overlap_fraction"] >= 0.5
    assert out["findings"] == [] and out["hypothesis_answer"]["answer"] == "supported"
    threads = {t["name"]: t for t in out["threads"]}
    assert threads["prefill-0"]["wall_in_ranges_ms"] > 0.9 * out["window_ms"]
    assert (
        threads["kv-0"]["state_fractions"]["sleep"] == 0
    )  # a Python loop never sleeps in nanosleep
    assert threads["prefill-0"]["state_fractions"]["sleep"] > 0.3  # the native wait does


async def test_trace_parses_and_png_shows_both_threads(episodes, profile_client):
    out = episodes["pydll"]
    trace_uri, png_uri = out["artifacts"]
    trace = json.loads((await profile_client.read_resource(trace_uri)).contents[0].text)
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert any(n.startswith("prefill-0") for n in names) and any(
        n.startswith("kv-0") for n in names
    )
    spans = {(e["name"], e["tid"]) for e in events if e["ph"] == "X" and e["cat"] == "span"}
    assert {n for n, _ in spans} == {"dispatch", "kv_transfer"} and len({t for _, t in spans}) == 2
    assert all(e["dur"] >= 0 and e["ts"] >= -1e3 for e in events if e["ph"] == "X")
    assert any(e.get("cat") == "state" for e in events)  # futex waits, sampled from the host
    png = (await profile_client.read_resource(png_uri)).contents[0]
    assert png.mime_type == "image/png"
    _assert_two_rows_of_bars(base64.b64decode(png.blob))


def _assert_two_rows_of_bars(data: bytes) -> None:
    """`dispatch` (first tab10 colour) and `kv_transfer` (second) bars sit in different rows."""
    import matplotlib.image
    import numpy as np

    img = matplotlib.image.imread(io.BytesIO(data), format="png")[..., :3]
    img = img[:, : int(0.7 * img.shape[1])]  # the plot, not the legend beside it
    rows = {}
    for name, rgb in (("dispatch", (0.122, 0.467, 0.706)), ("kv_transfer", (1.0, 0.498, 0.055))):
        hit = np.all(np.abs(img - np.array(rgb)) < 0.03, axis=-1)
        assert hit.sum() > 200, f"no {name} bars in the timeline"
        rows[name] = np.nonzero(hit.any(axis=1))[0]
    assert (
        rows["dispatch"].max() < rows["kv_transfer"].min()
        or rows["kv_transfer"].max() < rows["dispatch"].min()
    )


def _gil_shares(out: dict) -> dict[str, float]:
    return {t["name"]: t["gil_held_fraction"] for t in out["threads"] if t["name"]}


def _sampler_resolved(out: dict) -> bool:
    """Two threads that run Python hold the GIL between them nearly all the window; a sampler starved
    of CPU (a loaded 2-core CI box) records fewer samples than its rate and every share shrinks."""
    gil = _gil_shares(out)
    return gil["prefill-0"] + gil["kv-0"] >= 0.6


async def test_copy_as_a_python_loop_holds_the_gil_one_torch_call_does_not(profile_client):
    outs = {}
    for copy in ("python", "torch"):
        for _ in range(2):  # a run the sampler could not resolve is measured once more
            outs[copy] = await call(
                profile_client,
                "profile",
                path="episode.py",
                entry="copy_episode",
                workload_args=[copy, 150],
                overlap=PAIR,
            )
            if copy == "torch" or _sampler_resolved(outs[copy]):
                break
    # kv-0's share of the samples in which either thread held the GIL: a sampler's undercount
    # scales both threads alike, so this ratio is what the mechanism fixes (~0.5 for two Python
    # loops taking turns, ~0 for a copy that runs in C++ with the GIL released).
    kv_share = {}
    for copy, out in outs.items():
        gil = _gil_shares(out)
        held = gil["prefill-0"] + gil["kv-0"]
        assert held > 0, f"py-spy saw no thread holding the GIL in the {copy} run"
        kv_share[copy] = gil["kv-0"] / held
    assert kv_share["python"] > 0.3 and kv_share["torch"] < 0.2, kv_share
    waits = {
        c: next(w for w in o["contention"]["waits"] if w["waiter"].startswith("prefill-0"))
        for c, o in outs.items()
    }
    assert "_copy_blocks_python" in waits["python"]["holder_gil_site"]
    assert outs["torch"]["top_ops_by_self"][0]["name"] == "aten::copy_"
