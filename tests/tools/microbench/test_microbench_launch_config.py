"""microbench with launch configs, through the MCP client and the real sandbox: one impl under
two configs is an A/B, a planted slow config is 'slower', and a baseline named by experiment id
runs with the config that experiment recorded. Small budgets; verdicts, never times."""

import pytest
from conftest import ToolCallError, call

pytestmark = pytest.mark.anyio

# REPEAT launches of the same kernel: the same answer, REPEAT times the work.
REPEATED = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y, REPEAT=1):
    out = torch.empty_like(x)
    for _ in range(REPEAT):
        add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
"""
ARM = {"kernel": "vector_add", "entry": "add", "shapes": [{"N": 1024}], "budget_ms": 1500}


async def test_one_impl_under_two_configs(zoo_client):
    out = await call(
        zoo_client,
        "microbench",
        kernel="rmsnorm",
        impl="triton",
        baseline="triton",
        launch_config={"BLOCK_N": 64},
        baseline_launch_config={"BLOCK_N": 128, "num_warps": 2},
        shapes=[{"M": 4, "N": 64}],
        budget_ms=800,
    )
    (shape,) = out["shapes"]
    assert shape["ratio"] is not None and shape["ci_low"] <= shape["ratio"] <= shape["ci_high"]
    assert shape["candidate"]["spot_check"] == shape["baseline"]["spot_check"] == "passed"
    assert shape["candidate"]["code"] == "triton {'BLOCK_N': 64}"
    assert out["launch_config_applied"] == {
        "candidate": {"entry_kwargs": [], "overridden": {"rmsnorm_kernel": ["BLOCK_N"]}},
        "baseline": {
            "entry_kwargs": [],
            "overridden": {"rmsnorm_kernel": ["BLOCK_N", "num_warps"]},
        },
    }


async def test_a_planted_slow_config_is_slower_and_an_experiment_keeps_its_config(zoo_client):
    slow = await call(
        zoo_client,
        "microbench",
        source=REPEATED,
        baseline_source=REPEATED,
        launch_config={"REPEAT": 4},
        baseline_launch_config={"REPEAT": 1},
        **ARM,
    )
    assert slow["verdict"] == "slower" and slow["shapes"][0]["ratio"] > 2
    assert slow["launch_config_applied"]["candidate"] == {
        "entry_kwargs": ["REPEAT"],
        "overridden": {},
    }

    # the recorded experiment reran as baseline: its code AND its config (REPEAT=4), so the
    # same source without a config is faster (with today's default it would be an A/A)
    recorded = await call(
        zoo_client, "microbench", source=REPEATED, launch_config={"REPEAT": 4}, **ARM
    )
    again = await call(
        zoo_client, "microbench", source=REPEATED, baseline=recorded["experiment_id"], **ARM
    )
    assert again["verdict"] == "faster" and again["shapes"][0]["ratio"] < 0.5
    assert "its recorded launch_config {'REPEAT': 4}" in again["shapes"][0]["baseline"]["code"]
    assert again["launch_config_applied"] == {
        "baseline": {"entry_kwargs": ["REPEAT"], "overridden": {}}
    }
    # baseline_launch_config replaces the recorded one: now an A/A of REPEAT=1
    same = await call(
        zoo_client,
        "microbench",
        source=REPEATED,
        baseline=recorded["experiment_id"],
        baseline_launch_config={"REPEAT": 1},
        **ARM,
    )
    assert 0.5 < same["shapes"][0]["ratio"] < 2
    assert "baseline_launch_config {'REPEAT': 1}" in same["shapes"][0]["baseline"]["code"]


async def test_a_config_name_nothing_uses_is_an_error(zoo_client):
    with pytest.raises(ToolCallError, match=r"\['BLOCK'\].*constexprs BLOCK_N, ONE_BLOCK"):
        await call(
            zoo_client,
            "microbench",
            kernel="rmsnorm",
            launch_config={"BLOCK": 64},
            shapes=[{"M": 4, "N": 64}],
            budget_ms=300,
        )
    with pytest.raises(ToolCallError, match="baseline_launch_config needs a baseline"):
        await call(
            zoo_client, "microbench", kernel="rmsnorm", baseline_launch_config={"BLOCK_N": 64}
        )
