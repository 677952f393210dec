"""compile_kernel under launch_config: the captured launch compiles with the config's constexpr
and num_warps (the PTX's thread count says so too), explicit fields win, unknown names fail."""

import re

import pytest
from compile_matmul import KERNELS, MATMUL_SIGNATURE, MATMUL_SOURCE
from conftest import ToolCallError, call

pytestmark = pytest.mark.anyio


async def _ir(client, out: dict, name: str = "kernel.ptx") -> str:
    (uri,) = [u for u in out["artifacts"] if u.endswith(f"/{name}")]
    return (await client.read_resource(uri)).contents[0].text


async def test_the_config_reaches_the_captured_launch(client):
    out = await call(
        client,
        "compile_kernel",
        kernel="rmsnorm",
        target="sm_90a",
        launch_config={"BLOCK_N": 256, "num_warps": 8},
    )
    (k,) = out["kernels"]
    assert k["num_warps"] == 8 and k["threads_per_block"] == 256
    assert k["constexprs"]["BLOCK_N"] == 256
    assert out["launch_config_applied"] == {
        "entry_kwargs": [],
        "overridden": {"rmsnorm_kernel": ["BLOCK_N", "num_warps"]},
    }
    # independent witnesses: the PTX's own launch bound (8 warps x 32 threads) and the
    # TTIR's block of columns (tl.arange(0, BLOCK_N))
    assert re.search(r"\.reqntid 256\b", await _ir(client, out))
    assert re.search(r"tt\.make_range \{end = 256 : i32", await _ir(client, out, "kernel.ttir"))

    # an explicit num_warps= wins over the config's
    explicit = await call(
        client,
        "compile_kernel",
        kernel="rmsnorm",
        target="sm_90a",
        launch_config={"BLOCK_N": 256, "num_warps": 8},
        num_warps=4,
    )
    (k4,) = explicit["kernels"]
    assert k4["num_warps"] == 4 and k4["constexprs"]["BLOCK_N"] == 256
    assert re.search(r"\.reqntid 128\b", await _ir(client, explicit))
    assert explicit["launch_config_applied"]["overridden"] == {"rmsnorm_kernel": ["BLOCK_N"]}


async def test_an_unknown_name_lists_the_constexprs(client):
    with pytest.raises(ToolCallError, match=r"\['BLOCK'\].*constexprs BLOCK_N, ONE_BLOCK"):
        await call(
            client, "compile_kernel", kernel="rmsnorm", target="sm_90a", launch_config={"BLOCK": 8}
        )


async def test_autotuned_and_signature_compiles_take_the_config(client):
    tuned = await call(
        client,
        "compile_kernel",
        kernel="vector_add",
        source=(KERNELS / "autotuned.py").read_text(),
        target="sm_80",
        launch_config={"BLOCK": 512, "num_warps": 2},
    )
    (k,) = tuned["kernels"]  # @autotune's first config (BLOCK 128, 4 warps), the config over it
    assert (k["constexprs"], k["num_warps"]) == ({"BLOCK": 512}, 2)
    assert tuned["launch_config_applied"]["overridden"] == {"add_kernel": ["BLOCK", "num_warps"]}

    # no launcher (signature=): the config's constexprs and options go to the kernel itself
    signed = await call(
        client,
        "compile_kernel",
        source=MATMUL_SOURCE,
        entry="matmul_kernel",
        target="sm_90a",
        signature=MATMUL_SIGNATURE,
        constexprs={"BLOCK_M": 32, "BLOCK_N": 32},
        launch_config={"BLOCK_M": 64, "BLOCK_K": 16, "num_warps": 2},
    )
    (m,) = signed["kernels"]
    assert m["constexprs"] == {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}  # explicit wins
    assert m["num_warps"] == 2
    with pytest.raises(ToolCallError, match=r"\['BLOCK_Q'\].*constexprs BLOCK_M, BLOCK_N, BLOCK_K"):
        await call(
            client,
            "compile_kernel",
            source=MATMUL_SOURCE,
            entry="matmul_kernel",
            target="sm_90a",
            signature=signed["kernels"][0]["signature"],
            constexprs={"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16},
            launch_config={"BLOCK_Q": 8},
        )
