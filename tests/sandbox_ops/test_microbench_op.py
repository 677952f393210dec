"""The microbench worker op in-process (no sandbox): raw samples, interleaving,
spot-check files, clear failures. Small budgets: each test times for a fraction of a second."""

from pathlib import Path

import pytest

from infra_agent.sandbox.worker.context import JobContext
from infra_agent.sandbox.worker.ops import microbench
from infra_agent.sandbox.worker.shared import median_rel_se
from infra_agent.sandbox.worker.tensors import load_tensors

ADD = "import torch\ndef add(x, y):\n    return x + y\n"
ARGS = [{"name": "x", "shape": ["N"]}, {"name": "y", "shape": ["N"]}]


@pytest.fixture
def ctx(tmp_path: Path) -> JobContext:
    for d in ("in", "out"):
        (tmp_path / d).mkdir()
    return JobContext(
        job_dir=tmp_path,
        in_dir=tmp_path / "in",
        out_dir=tmp_path / "out",
        workspace=None,
        device="cpu",
    )


def _payload(arms, n=4096, budget_ms=300.0, **extra):
    return {
        "arms": arms,
        "args": ARGS,
        "shape": {"N": n},
        "dtype": "float32",
        "input_seeds": list(range(100, 116)),
        "budget_ms": budget_ms,
        "target_rel_se": 0.005,
        "num_spot_checks": 3,
        "order_seed": 7,
        **extra,
    }


def test_interleaved_arms_get_equal_samples_and_spot_checks(ctx):
    arms = [
        {"name": "candidate", "entry": "add", "source": ADD},
        {"name": "baseline", "entry": "add", "source": ADD},
    ]
    out = microbench.run(_payload(arms), ctx)
    cand, base = out["arms"]["candidate"]["samples_ns"], out["arms"]["baseline"]["samples_ns"]
    assert len(cand) == len(base) >= 10
    assert all(t > 0 for t in cand + base)
    assert out["stop_reason"] in ("target_se", "budget", "max_samples")
    assert out["warmup"]["calls_per_arm"] >= 1
    assert 2 <= out["num_input_sets"] <= 16
    assert out["device"]["device"] == "cpu" and out["threads"] == 1
    checks = out["spot_checks"]
    assert {c["arm"] for c in checks} == {"candidate", "baseline"} and len(checks) == 6
    for c in checks:
        assert 0 <= c["input_set"] < out["num_input_sets"]
        saved = load_tensors(ctx.out_dir / c["file"])
        assert saved["0"].shape == (4096,)


def test_stops_on_target_standard_error_when_loose(ctx):
    arms = [{"name": "candidate", "entry": "add", "source": ADD}]
    out = microbench.run(_payload(arms, budget_ms=5000.0, target_rel_se=0.2), ctx)
    assert out["stop_reason"] == "target_se"
    assert out["elapsed_ms"] < 5000


SLOW = "import time\ndef add(x, y):\n    time.sleep(0.05)\n    return x + y\n"


def test_a_slow_call_times_past_the_budget_until_every_arm_has_its_minimum(ctx):
    """50 ms calls, two arms, a 100 ms budget: ~1 pair fits. With min_timed_calls the loop goes on
    (stop_reason 'min_calls'), and stops as soon as both arms have them; without, it stops at the budget."""
    arms = [
        {"name": "candidate", "entry": "add", "source": SLOW},
        {"name": "baseline", "entry": "add", "source": ADD},
    ]
    out = microbench.run(
        _payload(arms, budget_ms=100.0, min_timed_calls=6, max_budget_ms=10_000.0), ctx
    )
    counts = {len(out["arms"][a]["samples_ns"]) for a in ("candidate", "baseline")}
    assert counts == {6} and out["stop_reason"] == "min_calls"
    plain = microbench.run(_payload(arms, budget_ms=100.0), ctx)
    assert len(plain["arms"]["candidate"]["samples_ns"]) < 6 and plain["stop_reason"] == "budget"
    capped = microbench.run(
        _payload(arms, budget_ms=100.0, min_timed_calls=1000, max_budget_ms=400.0), ctx
    )
    assert (
        capped["stop_reason"] == "budget" and len(capped["arms"]["candidate"]["samples_ns"]) < 1000
    )


def test_a_candidate_raising_mid_run_names_the_call(ctx):
    flaky = ADD + (
        "N = [0]\ndef bad(x, y):\n    N[0] += 1\n    if N[0] > 12:\n        raise ValueError('boom')\n"
        "    return x + y\n"
    )
    arms = [{"name": "candidate", "entry": "bad", "source": flaky}]
    with pytest.raises(RuntimeError, match=r"candidate raised on call 13 .*ValueError: boom"):
        microbench.run(_payload(arms, budget_ms=2000.0, target_rel_se=1e-6), ctx)


def test_a_non_tensor_result_is_refused(ctx):
    arms = [{"name": "candidate", "entry": "f", "source": "def f(x, y):\n    return 3\n"}]
    with pytest.raises(TypeError, match="return a tensor"):
        microbench.run(_payload(arms), ctx)


def test_inputs_too_large_for_memory_are_refused_before_allocation(ctx):
    arms = [{"name": "candidate", "entry": "add", "source": ADD}]
    with pytest.raises(MemoryError, match="GiB"):
        microbench.run(_payload(arms, n=1 << 42), ctx)


def test_median_rel_se_shrinks_with_more_samples():
    import numpy as np

    rng = np.random.default_rng(0)
    small, large = (
        median_rel_se(rng.normal(100, 10, 100)),
        median_rel_se(rng.normal(100, 10, 10000)),
    )
    assert large < small / 5
    assert median_rel_se([1, 2]) == float("inf")


def test_peaks_op_measures_positive_ceilings_and_a_fingerprint(ctx):
    from infra_agent.sandbox.worker.ops import peaks

    out = peaks.run({"copy_bytes": 32 << 20, "matmul_n": 256}, ctx)
    assert out["copy_gbps"] > 0 and out["cache_copy_gbps"] > 0
    assert out["matmul_tflops"]["float32"] > 0
    assert (
        out["device"]["device"] == "cpu"
        and out["device"]["cpu_cores"] >= 1
        and out["device"]["torch"]
    )
    assert "thread" in out["method"]


def test_a_spec_input_generator_is_used_when_declared(ctx, tmp_path):
    gen = tmp_path / "gen.py"
    gen.write_text(
        "import torch\ndef make(shape, dtype, generator):\n"
        "    x = torch.full((shape['N'],), 2.0, dtype=dtype)\n    return [x, x.clone()]\n"
    )
    arms = [{"name": "candidate", "entry": "add", "source": ADD}]
    out = microbench.run(_payload(arms, n=64, make_inputs={"entry": "make", "path": str(gen)}), ctx)
    saved = load_tensors(ctx.out_dir / out["spot_checks"][0]["file"])
    assert bool((saved["0"] == 4.0).all())  # 2 + 2: the generator's inputs, not make_inputs' draws


def test_minor_page_faults_are_counted_per_arm_during_timed_calls(ctx):
    # 4 MiB of fresh anonymous pages touched on every call (unmapped again when it returns)
    fresh = (
        "import mmap\ndef add(x, y):\n    m = mmap.mmap(-1, 1 << 22)\n    m.write(b'1' * (1 << 22))\n"
        "    m.close()\n    return x + y\n"
    )
    arms = [
        {"name": "candidate", "entry": "add", "source": fresh},
        {"name": "baseline", "entry": "add", "source": ADD},
    ]
    out = microbench.run(_payload(arms, budget_ms=300.0), ctx)
    per_call = {
        name: arm["minor_faults"] / len(arm["samples_ns"]) for name, arm in out["arms"].items()
    }
    assert per_call["candidate"] >= 500  # ~1024 pages of 4 KiB per call
    assert per_call["baseline"] < 50
