"""The peaks cache: keyed by device fingerprint, validated, datasheet only as a label."""

import math

from infra_agent.tools.common.peaks import _validated, datasheet, load_cached, store

CPU = {
    "device": "cpu",
    "name": "AMD EPYC",
    "cpu": "AMD EPYC",
    "cpu_cores": 2,
    "torch": "2.13.0+cpu",
    "memory_bytes": 1 << 34,
}


def _record(fp, gbps=10.0):
    return _validated(
        {
            "device": fp,
            "copy_gbps": gbps,
            "cache_copy_gbps": 40.0,
            "matmul_tflops": {"float32": 0.05},
            "method": "test",
        }
    )


def test_cache_is_keyed_by_fingerprint(tmp_path):
    store(tmp_path, _record(CPU))
    assert load_cached(tmp_path, CPU)["copy_gbps"] == 10.0
    assert load_cached(tmp_path, {**CPU, "torch": "2.14.0"}) is None  # new software: measure again
    other = {**CPU, "name": "Intel Xeon", "cpu": "Intel Xeon"}
    store(tmp_path, _record(other, gbps=20.0))
    assert load_cached(tmp_path, CPU)["copy_gbps"] == 10.0
    assert load_cached(tmp_path, other)["copy_gbps"] == 20.0


def test_malformed_or_nonpositive_numbers_are_rejected():
    assert _record(CPU)["source"] == "measured"
    assert _record(CPU, gbps=-1.0) is None
    assert _record(CPU, gbps=math.nan) is None
    assert _validated({"device": CPU, "copy_gbps": 1.0, "matmul_tflops": {}}) is None
    assert _validated({"copy_gbps": "fast"}) is None


def test_datasheet_numbers_are_labelled_and_gpu_only():
    h100 = datasheet({"device": "cuda", "name": "NVIDIA H100 80GB HBM3"})
    assert h100["copy_gbps"] == 3350.0 and "datasheet" in h100["source"]
    assert datasheet({"device": "cuda", "name": "NVIDIA H100 PCIe"})["copy_gbps"] == 2000.0
    assert datasheet(CPU) is None
    assert datasheet({"device": "cuda", "name": "Some Future GPU"}) is None
