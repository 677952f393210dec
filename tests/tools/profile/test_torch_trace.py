"""An engine's torch trace is untrusted input: read within caps, paths kept inside its folder,
self times that add up (the real vLLM trace: tests/serving/tools/test_serve_vllm.py)."""

from __future__ import annotations

import gzip
import json
from types import SimpleNamespace

import pytest

from infra_agent.tools.base import AgentError
from infra_agent.tools.profile import torch_trace
from infra_agent.tools.profile.engine_window import inside


def _trace(path, events, base_ns=1_000_000_000):
    doc = {"baseTimeNanoseconds": base_ns, "traceEvents": events}
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def _op(name, ts, dur, tid=7, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}


def test_self_time_is_total_less_the_ops_inside_and_adds_up_to_the_outer_op(tmp_path):
    events = [
        _op("step", 0, 100, cat="user_annotation"),
        _op("aten::linear", 10, 50),
        _op("aten::mm", 15, 40),
        _op("aten::add", 70, 10),
        _op("aten::mm", 200, 5, tid=8),  # another thread: not nested in `step`
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "args": {"name": "thread 7 (w)"}},
    ]
    trace = torch_trace.read(_trace(tmp_path / "t.pt.trace.json.gz", events), 1 << 20)
    raw = torch_trace.window([trace], (0, 1))
    ops = {o["name"]: o for o in raw["ops"]}
    assert (ops["step"]["self_us"], ops["aten::linear"]["self_us"]) == (40, 10)
    assert (ops["aten::mm"]["count"], ops["aten::mm"]["self_us"]) == (2, 45)
    # on thread 7 the self times tile the outer op's duration
    thread7 = 40 + 10 + 40 + 10
    assert thread7 == ops["step"]["total_us"]
    assert raw["threads"] == {"7": {"name": "w"}}
    assert [r["name"] for r in raw["torch_ranges"]] == ["step"]


def test_an_op_whose_only_child_has_its_name_counts_once_as_in_torchs_table(tmp_path):
    # Tensor.div_ dispatches aten::div_ to an overload, also aten::div_: torch's key_averages
    # counts the pair once (EventList._remove_dup_nodes), vLLM's profiler_out.txt with it
    events = [_op("aten::div_", 0, 10), _op("aten::div_", 1, 8), _op("aten::copy_", 2, 3)]
    trace = torch_trace.read(_trace(tmp_path / "t.pt.trace.json.gz", events), 1 << 20)
    ops = {o["name"]: o for o in torch_trace.window([trace], (0, 1))["ops"]}
    assert (ops["aten::div_"]["count"], ops["aten::div_"]["self_us"]) == (1, 7)
    assert ops["aten::div_"]["total_us"] == 10 and ops["aten::copy_"]["count"] == 1


def test_a_trace_that_inflates_past_the_cap_is_refused(tmp_path):
    events = [_op(f"aten::op{i}", i, 1) for i in range(2000)]
    path = _trace(tmp_path / "big.pt.trace.json.gz", events)
    assert path.stat().st_size < 20_000  # small on disk, large inflated
    with pytest.raises(AgentError, match="inflates past"):
        torch_trace.read(path, 20_000)
    with pytest.raises(AgentError, match="not JSON"):
        bad = tmp_path / "bad.json"
        bad.write_text("{")
        torch_trace.read(bad, 1 << 20)
    cut = tmp_path / "cut.pt.trace.json.gz"
    cut.write_bytes(path.read_bytes()[:-100])  # a gzip its writer has not finished
    assert torch_trace.complete(path) and not torch_trace.complete(cut)


def test_paths_the_engine_reports_stay_inside_its_folder(tmp_path):
    folder = tmp_path / "engine-x"
    (folder / "profiles").mkdir(parents=True)
    (folder / "profiles" / "w.json").write_text("{}")
    (tmp_path / "secret").write_text("no")
    (folder / "profiles" / "link.json").symlink_to(tmp_path / "secret")
    engine = SimpleNamespace(folder=folder)
    assert inside(engine, "profiles/w.json") == (folder / "profiles" / "w.json").resolve()
    assert inside(engine, "/jobs/engine-x/profiles/w.json") is not None
    for escape in ("../secret", str(tmp_path / "secret"), "profiles/link.json", 5, ""):
        assert inside(engine, escape) is None, escape
