"""compile_kernel through the MCP server and the sandbox, end to end: caching, baselines
(an experiment id or source) and their diff, expect, AMD, bad input."""

from __future__ import annotations

import pytest
from compile_matmul import KERNELS, MATMUL_SIGNATURE, MATMUL_SOURCE
from conftest import ToolCallError, call

from infra_agent.kernels.workspace import EMBEDDED_ROOT


@pytest.mark.anyio
async def test_tool_compiles_caches_and_diffs(client):
    first = await call(
        client,
        "compile_kernel",
        kernel="rmsnorm",
        target="sm_90a",
        hypothesis="fits in 32 regs",
        expect=["registers_per_thread <= 32", "spill_stores_bytes == 0 and local_store == 0"],
    )
    (k,) = first["kernels"]
    assert first["cached"] is False and first["arch"] == "sm_90a" and k["registers_per_thread"] > 0
    assert first["notes"] == []  # every number came from the compiler's own reports
    assert any(uri.endswith("/kernel.sass") for uri in first["artifacts"])
    assert first["summary"].startswith("sm_90a: rmsnorm_kernel")
    assert first["hypothesis_answer"]["answer"] == (
        "supported" if k["registers_per_thread"] <= 32 else "contradicted"
    )
    assert (
        first["hypothesis_answer"]["conditions"][0]["comparisons"][0]["left"]
        == k["registers_per_thread"]
    )

    again = await call(client, "compile_kernel", kernel="rmsnorm", target="sm_90a")
    assert (
        again["cached"] is True
        and again["kernels"] == first["kernels"]
        and "(cached)" in again["summary"]
    )
    assert any(uri.endswith("/kernel.sass") for uri in again["artifacts"])

    fewer = await call(
        client,
        "compile_kernel",
        kernel="rmsnorm",
        target="sm_90a",
        num_warps=4,
        baseline=first["experiment_id"],
        expect=[
            "num_warps == baseline.num_warps / 4",
            "threads_per_block > baseline.threads_per_block",
            "sgprs <= baseline.sgprs",
        ],
    )
    moved = {c["field"]: c for c in fewer["diff"]}
    assert moved["num_warps"]["before"] == 16 and moved["num_warps"]["after"] == 4
    answer = fewer["hypothesis_answer"]  # sgprs: AMD only, so null on sm_90a and nothing to decide
    assert [c["answer"] for c in answer["conditions"]] == [
        "supported",
        "contradicted",
        "inconclusive",
    ]
    assert (
        answer["answer"] == "contradicted"
        and answer["conditions"][0]["comparisons"][0]["right"] == 4
    )
    assert "sgprs has no value" in answer["conditions"][2]["comparisons"][0]["reason"]
    assert first["experiment_id"] in fewer["baseline"] and "vs " in fewer["summary"]

    # the agent's variant of a spec kernel: launched like the spec, diffed against the original
    variant = (
        (EMBEDDED_ROOT / "vector_add" / "vector_add_triton.py")
        .read_text()
        .replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 256")
    )
    original = await call(client, "compile_kernel", kernel="vector_add", target="sm_80")
    changed = await call(
        client,
        "compile_kernel",
        kernel="vector_add",
        source=variant,
        target="sm_80",
        baseline=original["experiment_id"],
    )
    moved = {c["field"]: c for c in changed["diff"]}
    assert (moved["constexprs.BLOCK_SIZE"]["before"], moved["constexprs.BLOCK_SIZE"]["after"]) == (
        1024,
        256,
    )


@pytest.mark.anyio
async def test_tool_baseline_source_and_amd(client):
    cand = MATMUL_SOURCE
    base = cand.replace(
        "acc += tl.dot(a, b)",  # the same product on CUDA cores
        "acc += tl.sum(a[:, :, None].to(tl.float32) * b[None, :, :].to(tl.float32), axis=1)",
    )
    common = dict(
        entry="matmul_kernel",
        target="sm_90a",
        num_warps=4,
        signature=MATMUL_SIGNATURE,
        constexprs={"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16},
    )
    out = await call(client, "compile_kernel", source=cand, baseline=base, **common)
    moved = {c["field"]: c for c in out["diff"]}
    assert moved["instruction_mix.tensor_core_mma"]["before"] == 0
    assert moved["instruction_mix.tensor_core_mma"]["after"] > 0
    assert "tensor-core MMA 0→" in out["summary"]

    amd = await call(client, "compile_kernel", source=cand, **{**common, "target": "gfx942"})
    (k,) = amd["kernels"]
    assert amd["backend"] == "hip" and k["sgprs"] > 0 and k["spilled_registers"] == 0
    assert k["instruction_mix"]["tensor_core_mma"] > 0  # v_mfma
    assert any(uri.endswith("/kernel.amdgcn") for uri in amd["artifacts"])


@pytest.mark.anyio
async def test_tool_bad_inputs_are_clear_errors(client):
    with pytest.raises(ToolCallError, match="unknown target 'sm_99'.*sm_90a"):
        await call(client, "compile_kernel", kernel="rmsnorm", target="sm_99")
    with pytest.raises(
        ToolCallError, match=r"names registers,.*registers_per_thread.*expect://compile_kernel"
    ):
        await call(client, "compile_kernel", kernel="rmsnorm", expect=["registers <= 64"])
    with pytest.raises(ToolCallError, match="no baseline; pass baseline="):
        await call(client, "compile_kernel", kernel="rmsnorm", expect=["ffma < baseline.ffma"])
    with pytest.raises(ToolCallError, match="Subscript"):
        await call(client, "compile_kernel", kernel="rmsnorm", expect=["kernels[0] == 1"])
    with pytest.raises(ToolCallError, match="no @triton.jit function 'nope'"):
        await call(client, "compile_kernel", kernel="rmsnorm", entry="nope", target="sm_80")
    sig = {"signature": {"x_ptr": "*fp32"}, "target": "sm_80"}
    with pytest.raises(ToolCallError, match=r"candidate.py:4:.*(OSError|PermissionError|socket)"):
        await call(
            client, "compile_kernel", source=(KERNELS / "network_at_import.py").read_text(), **sig
        )
    with pytest.raises(ToolCallError, match="did not finish within 4 s"):
        await call(
            client,
            "compile_kernel",
            source="import triton\nwhile True:\n    pass\n",
            timeout_s=4,
            **sig,
        )
    with pytest.raises(ToolCallError, match=r"candidate.py:11:9: compile error: .*ranks"):
        await call(
            client,
            "compile_kernel",
            source=(KERNELS / "type_error.py").read_text(),
            constexprs={"BLOCK": 16},
            **{**sig, "signature": {"x_ptr": "*fp32", "N": "i32"}},
        )
