"""The profile's op table, counted in one pass over the exported trace (recorder.op_rows), against
torch's own count of the same window: key_averages(group_by_input_shape=True), the second source.

The window has what makes self time hard: ops nested in ops (aten::linear over aten::mm),
record_function ranges enclosing ops, a range inside a range, the same op at two shapes, and a
second thread recording at the same time."""

import threading

import pytest
import torch

from infra_agent.sandbox.worker import recorder

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _workload(steps: int) -> None:
    w = torch.randn(32, 16)
    for i in range(steps):
        with torch.profiler.record_function("step"):
            with torch.profiler.record_function("inner"):
                torch.nn.functional.linear(torch.randn(4 + i % 2, 16), w)
            torch.randn(8).softmax(-1)


def _torch_rows(prof) -> dict:
    rows = {}
    for avg in prof.key_averages(group_by_input_shape=True):
        if avg.device_type == torch.autograd.DeviceType.CPU:
            rows[(avg.key, str(avg.input_shapes))] = avg
    return rows


def test_the_op_table_is_the_one_torch_counts(tmp_path):
    window = recorder.Window("cpu")
    window.start()
    other = threading.Thread(target=_workload, args=(30,))
    other.start()
    _workload(30)
    other.join()
    window.close()
    raw = window.export(tmp_path)
    ours = {(r["name"], r["input_shapes"]): r for r in raw["ops"]}
    theirs = _torch_rows(window.prof)

    # nested three deep (linear > matmul > mm), at two shapes; ranges in ranges
    assert {("aten::mm", "[[4, 16], [16, 32]]"), ("aten::mm", "[[5, 16], [16, 32]]")} <= set(theirs)
    assert {("step", "[]"), ("inner", "[]")} <= set(theirs)
    assert set(ours) == set(theirs)
    for key, avg in theirs.items():
        row = ours[key]
        assert row["count"] == avg.count, key
        # the trace holds times in µs with 3 decimals: totals agree to rounding
        assert row["total_us"] == pytest.approx(avg.cpu_time_total, abs=0.01 * avg.count), key
        assert row["self_us"] == pytest.approx(avg.self_cpu_time_total, abs=0.01 * avg.count), key


def test_the_table_keeps_the_heaviest_rows_by_self_and_by_total_time():
    spans = [
        (1, 0.0, 100.0, "outer", []),  # total 100, self 20 (it encloses the next three: 80)
        (1, 1.0, 30.0, "a", [[2]]),
        (1, 40.0, 30.0, "a", [[2]]),
        (1, 75.0, 20.0, "b", []),
        (2, 0.0, 5.0, "c", []),  # another thread: nothing encloses it
    ]
    rows = {r["name"]: r for r in recorder.op_rows(spans, max_ops=1)}
    assert set(rows) == {"a", "outer"}  # the most self time (a: 60), the most total (outer: 100)
    assert rows["outer"]["self_us"] == 20.0 and rows["outer"]["total_us"] == 100.0
    assert rows["a"]["count"] == 2 and rows["a"]["input_shapes"] == "[[2]]"
