"""Issue 34, item 8: sweep_kernel's default first-round budget fits interpreted calls on a CPU
host. At 200 ms a pair of interpreted rmsnorm calls (two arms of 5 timed calls and a warm-up)
did not fit, so race timings failed once before they were retried larger (red trials)."""

from conftest import in_forked_child

from infra_agent.kernels.workspace import EMBEDDED_ROOT
from infra_agent.tools.microbench.schema import MIN_TIMED_CALLS
from infra_agent.tools.sweep_kernel.race import WARMUP_CALLS
from infra_agent.tools.sweep_kernel.schema import Input


def _fastest_interpreted_call_ms(folder: str) -> float:
    """The zoo's rmsnorm at its first CPU shape, run by plain Python under the Triton
    interpreter: the fastest of 8 calls, in ms (the floor: a busy host only adds to it)."""
    import os
    import sys
    import time

    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, folder)
    import torch
    from rmsnorm_triton import rmsnorm
    from spec import SPEC

    shape = SPEC.shapes["cpu"][0]
    torch.set_num_threads(1)
    x, w = torch.randn(shape["M"], shape["N"]), torch.randn(shape["N"])
    rmsnorm(x, w)  # the first call pays for the interpreter's set-up
    times = []
    for _ in range(8):
        start = time.perf_counter()
        rmsnorm(x, w)
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def test_the_default_round_fits_a_pair_of_interpreted_calls():
    per_call_ms = in_forked_child(_fastest_interpreted_call_ms, str(EMBEDDED_ROOT / "rmsnorm"))
    # what the race itself asks of a pair's budget (race._time_pair): two arms of the timed
    # calls microbench needs and room for its warm-up
    needed_ms = 2 * per_call_ms * (MIN_TIMED_CALLS + WARMUP_CALLS)
    round_ms = Input(kernel="rmsnorm", space={"BLOCK_N": [64]}).round_ms
    assert round_ms >= needed_ms, (round_ms, per_call_ms)
