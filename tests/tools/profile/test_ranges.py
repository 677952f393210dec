"""The stdlib range helper workloads import (ia_worker.ranges in a job): records only while a
recording runs, per thread, nested, as a decorator, and capped."""

import threading

from infra_agent.sandbox.worker import ranges


def test_spans_record_name_thread_and_times_only_while_recording():
    with ranges.span("before"):
        pass
    ranges.start()

    @ranges.span("decorated")
    def work():
        with ranges.span("inner"):
            sum(range(1000))

    worker = threading.Thread(target=work, name="worker-1")
    worker.start()
    worker.join()
    with ranges.span("main"):
        pass
    out = ranges.stop()
    with ranges.span("after"):
        pass
    by_name = {r["name"]: r for r in out["ranges"]}
    assert set(by_name) == {"decorated", "inner", "main"}
    assert (
        by_name["inner"]["thread"] == "worker-1"
        and by_name["main"]["thread"] == threading.current_thread().name
    )
    assert by_name["inner"]["tid"] == by_name["decorated"]["tid"] != by_name["main"]["tid"]
    outer, inner = by_name["decorated"], by_name["inner"]
    assert outer["start_ns"] <= inner["start_ns"] <= inner["end_ns"] <= outer["end_ns"]
    assert inner["cpu_ns"] > 0 and out["dropped"] == 0 and out["unfinished"] == []


def test_an_open_span_at_stop_is_reported_unfinished_and_the_cap_counts_the_rest(monkeypatch):
    monkeypatch.setattr(ranges, "MAX_RANGES", 2)
    ranges.start()
    for _ in range(5):
        with ranges.span("tick"):
            pass
    held = ranges.span("still_open")
    held.__enter__()
    out = ranges.stop()
    assert len(out["ranges"]) == 2 and out["dropped"] == 3
    assert [u["name"] for u in out["unfinished"]] == ["still_open"]
    held.__exit__(None, None, None)  # closing after the recording ended records nothing
    assert len(ranges.stop()["ranges"]) == 2
