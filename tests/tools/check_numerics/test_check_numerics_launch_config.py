"""check_numerics under launch_config, through the MCP client and the real sandbox: a constexpr
override in the zoo's launch (a planted wrong config fails, a right one passes), a name the
entry takes as a parameter, and the errors for names nothing used."""

import pytest
from conftest import ToolCallError, call

pytestmark = pytest.mark.anyio

SMALL = {"shapes": [{"M": 4, "N": 64}], "dtypes": ["float32"], "trials": 1}

# One program of BLOCK elements: the entry's BLOCK parameter decides how much of out is written.
ONE_PROGRAM = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y, BLOCK=64):
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, x.numel(), BLOCK=BLOCK)
    return out
"""
TORCH_ADD = "def add(x, y):\n    return x + y\n"


async def test_a_constexpr_override_in_the_zoo_launch(zoo_client):
    # the zoo's entry derives ONE_BLOCK from its own BLOCK_N (64 at N=64): overriding BLOCK_N
    # alone leaves ONE_BLOCK=True with a 32-wide block, so columns 32..63 are never written
    wrong = await call(
        zoo_client, "check_numerics", kernel="rmsnorm", launch_config={"BLOCK_N": 32}, **SMALL
    )
    assert wrong["verdict"] == "fail"
    assert any(f["code"] == "unwritten_output" for f in wrong["findings"])
    assert wrong["cases"][0]["errors"]["candidate_nan_count"] == 4 * 32  # the unwritten half
    assert wrong["launch_config_applied"] == {
        "entry_kwargs": [],
        "overridden": {"rmsnorm_kernel": ["BLOCK_N"]},
    }
    assert "launch_config {'BLOCK_N': 32}" in wrong["summary"]

    right = await call(
        zoo_client,
        "check_numerics",
        kernel="rmsnorm",
        launch_config={"BLOCK_N": 128, "num_warps": 2},
        **SMALL,
    )
    assert right["verdict"] == "pass" and right["cases"][0]["triton_launches"] == 1
    assert right["launch_config_applied"]["overridden"] == {
        "rmsnorm_kernel": ["BLOCK_N", "num_warps"]
    }


async def test_a_name_the_entry_takes_reaches_the_entry(zoo_client):
    common = {
        "kernel": "vector_add",
        "source": ONE_PROGRAM,
        "entry": "add",
        "shapes": [{"N": 256}],
        "dtypes": ["float32"],
        "trials": 1,
    }
    # the entry's default (64) writes a quarter of the output: the config's 256 writes all of it
    default = await call(zoo_client, "check_numerics", **common)
    assert default["verdict"] == "fail"
    assert default["cases"][0]["errors"]["candidate_nan_count"] == 256 - 64
    full = await call(zoo_client, "check_numerics", launch_config={"BLOCK": 256}, **common)
    assert full["verdict"] == "pass"
    # passed to the entry, not forced into the launch (the entry passed it on itself)
    assert full["launch_config_applied"] == {"entry_kwargs": ["BLOCK"], "overridden": {}}


async def test_names_nothing_used_are_errors(zoo_client):
    with pytest.raises(
        ToolCallError, match=r"\['BLOCK'\].*rmsnorm_kernel: constexprs BLOCK_N, ONE_BLOCK"
    ):
        await call(
            zoo_client, "check_numerics", kernel="rmsnorm", launch_config={"BLOCK": 64}, **SMALL
        )
    # a runtime argument of the kernel is not a constexpr: not overridable either
    with pytest.raises(ToolCallError, match=r"\['N'\]"):
        await call(zoo_client, "check_numerics", kernel="rmsnorm", launch_config={"N": 64}, **SMALL)
    with pytest.raises(ToolCallError, match=r"\['BLOCK'\].*entry \(x, y\).*made none"):
        await call(
            zoo_client,
            "check_numerics",
            kernel="vector_add",
            source=TORCH_ADD,
            entry="add",
            launch_config={"BLOCK": 64},
            shapes=[{"N": 256}],
            trials=1,
        )


async def test_an_autotuned_kernel_runs_the_config_without_a_search(zoo_client):
    from pathlib import Path

    tuned = Path(__file__).parents[1] / "compile_kernel" / "compile_kernels" / "autotuned.py"
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        source=tuned.read_text(),
        entry="vector_add",
        launch_config={"BLOCK": 32, "num_warps": 2},
        shapes=[{"N": 100}],
        dtypes=["float32"],
        trials=1,
    )
    # the grid function reads meta["BLOCK"]: 4 programs of 32 cover N=100 only with the config's
    # value reaching it too
    assert out["verdict"] == "pass" and out["cases"][0]["triton_launches"] == 1
    assert out["launch_config_applied"]["overridden"] == {"add_kernel": ["BLOCK", "num_warps"]}
    # one program instead: a 32-wide block (the config's, not the tuner's 128) leaves 68 unwritten
    one = tuned.read_text().replace('[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)]', "[(1,)]")
    short = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        source=one,
        entry="vector_add",
        launch_config={"BLOCK": 32},
        shapes=[{"N": 100}],
        dtypes=["float32"],
        trials=1,
    )
    assert short["verdict"] == "fail" and short["cases"][0]["errors"]["candidate_nan_count"] == 68
