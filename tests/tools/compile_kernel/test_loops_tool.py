"""compile_kernel's loops and executed estimates through the MCP server, on the zoo's kda_decode:
vtiled's statistic loop runs V / BLOCK_V times per program, so its executed FP32 work per output
element is ~(V / BLOCK_V + 1)x fused's, not the 2x the static counts suggest."""

from __future__ import annotations

import re

import pytest
from conftest import ToolCallError, call

from infra_agent.kernels.workspace import EMBEDDED_ROOT

pytestmark = pytest.mark.anyio

SHAPE = {"B": 1, "H": 32, "K": 128, "V": 128}
# vtiled's tile width, read off the source (the launcher clamps it to next_power_of_2(V) >= 32)
SOURCE = (EMBEDDED_ROOT / "kda_decode" / "kda_decode_triton.py").read_text()
BLOCK_V = int(re.search(r"^VTILE_BLOCK_V = (\d+)$", SOURCE, re.M).group(1))
# the statistic loop's `for` statement, where the SASS loop's back edge should point
FOR_LINE = "kda_decode_triton.py:%d" % next(
    n for n, line in enumerate(SOURCE.splitlines(), 1) if "for v0 in range(0, V, BLOCK_V)" in line
)
INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_]*)")


async def sass_opcodes(client, out: dict) -> list[tuple[int, str]]:
    """(address, opcode) of every instruction in the compile's SASS artifact."""
    uri = next(u for u in out["artifacts"] if u.endswith("/kernel.sass"))
    text = (await client.read_resource(uri)).contents[0].text
    return [(int(a, 16), op) for a, op in INSN.findall(text)]


async def test_vtiled_loop_trip_count_and_executed_work_per_output(client):
    fused = await call(
        client, "compile_kernel", kernel="kda_decode", impl="fused", target="sm_90a", shape=SHAPE
    )
    vtiled = await call(
        client,
        "compile_kernel",
        kernel="kda_decode",
        impl="vtiled",
        target="sm_90a",
        shapes=[SHAPE],
        baseline=fused["experiment_id"],  # shapes=: the other tools' name
        hypothesis="vtiled executes > 4x fused's FFMA per output element",
        expect=[
            "executed_ffma_per_output > 4 * baseline.executed_ffma_per_output",
            f"constexpr('BLOCK_V') == {BLOCK_V}",
            "loops == 1 and baseline.loops == 0",
        ],
    )
    assert vtiled["hypothesis_answer"]["answer"] == "supported", vtiled["hypothesis_answer"]
    (f,), (v,) = fused["kernels"], vtiled["kernels"]

    # the loop: `for v0 in range(0, V, BLOCK_V)`, so V / BLOCK_V trips, tied to its source line
    (loop,) = v["loops"]
    assert loop["trip_count"] == SHAPE["V"] // BLOCK_V and loop["trip_count_from"] == "ttir"
    assert loop["source"] == FOR_LINE and "V=128" in loop["trip_count_how"]
    # its body, counted here from the SASS text between its first and last address
    opcodes = await sass_opcodes(client, vtiled)
    lo, hi = int(loop["header_address"], 16), int(loop["end_address"], 16)
    body_ffma = sum(1 for a, op in opcodes if lo <= a <= hi and op == "FFMA")
    all_ffma = sum(1 for _, op in opcodes if op == "FFMA")
    assert body_ffma == loop["body"]["ffma"] > 0 and all_ffma == v["instruction_mix"]["ffma"]

    # the launch: grid (B*H, V/BLOCK_V), BLOCK_V outputs of `out` per program
    assert v["launch"]["grid"] == [SHAPE["B"] * SHAPE["H"], SHAPE["V"] // BLOCK_V, 1]
    assert v["launch"]["output"] == "out_ptr" and v["launch"]["outputs_per_program"] == BLOCK_V
    assert f["launch"]["grid"] == [SHAPE["B"] * SHAPE["H"], 1, 1] and f["loops"] == []
    # executed FFMA per output element, by hand: the body runs `trips` times, the rest once, on every
    # one of the program's threads, shared by its outputs
    trips, threads = loop["trip_count"], v["threads_per_block"]
    by_hand = (all_ffma + (trips - 1) * body_ffma) * threads / BLOCK_V
    assert v["executed_estimate"]["per_output"]["ffma"] == pytest.approx(by_hand)
    assert f["executed_estimate"]["per_output"]["ffma"] == pytest.approx(
        f["instruction_mix"]["ffma"] * f["threads_per_block"] / SHAPE["V"]
    )
    # from the Triton source: 4 FP32 ops per state element (decay, S^T k, update, readout), done by every
    # tile for the whole row (V/BLOCK_V trips) plus its own slice: (V/BLOCK_V + 1)x fused's per output
    fp32 = {k["name"]: k["executed_estimate"]["per_output"] for k in (f, v)}
    ratio = (fp32[v["name"]]["ffma"] + fp32[v["name"]]["fmul"]) / (
        fp32[f["name"]]["ffma"] + fp32[f["name"]]["fmul"]
    )
    assert SHAPE["V"] / BLOCK_V + 1 - 0.5 < ratio < SHAPE["V"] / BLOCK_V + 1 + 1, ratio

    summary = vtiled["summary"]
    for said in (
        "kda_decode/vtiled at B=1 H=32 K=128 V=128 float32",
        "static counts: a loop body counts once",
        f"loop 0 at {FOR_LINE}, 4 trips (range(0, V=128, 32))",
        "executed FFMA per output",
        f"of the executed counts, loop 0 at {FOR_LINE}",
    ):
        assert said in summary, (said, summary)
    assert "static counts" not in fused["summary"] and "kda_decode/fused at B=1" in fused["summary"]


async def test_unknown_trip_counts_say_so_and_can_be_given(client):
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "N": "i32"}
    source = (
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def k(x_ptr, y_ptr, N, BLOCK: tl.constexpr):\n"
        "    acc = tl.zeros((BLOCK,), dtype=tl.float32)\n"
        "    for i in range(0, N, BLOCK):\n"
        "        acc += tl.load(x_ptr + i + tl.arange(0, BLOCK)) * 2.0\n"
        "    tl.store(y_ptr + tl.arange(0, BLOCK), acc)\n"
    )
    common = dict(source=source, signature=signature, constexprs={"BLOCK": 128}, target="sm_90a")
    out = await call(client, "compile_kernel", **common, expect=["executed_fmul_per_output > 0"])
    (k,) = out["kernels"]
    (loop,) = k["loops"]
    assert loop["trip_count"] is None and "depends on N" in loop["trip_count_how"]
    assert k["executed_estimate"] is None and out["hypothesis_answer"]["answer"] == "inconclusive"
    assert (
        "static counts: a loop body counts once" in out["summary"]
        and "loop_trip_counts=" in out["summary"]
    )
    assert out["summary"].startswith("sm_90a: k (inline source with the signature given) ")
    given = await call(client, "compile_kernel", **common, loop_trip_counts={"0": 8})
    (k,) = given["kernels"]
    assert (
        k["loops"][0]["trip_count_from"] == "given" and k["executed_estimate"]["per_output"] is None
    )
    body = k["loops"][0]["body"]["fmul"]
    assert k["executed_estimate"]["per_thread"]["fmul"] == k["instruction_mix"]["fmul"] + 7 * body
    assert any("no launch was seen" in n for n in given["notes"])
    with pytest.raises(ToolCallError, match="one example shape and shapes= has 2"):
        await call(client, "compile_kernel", kernel="kda_decode", shapes=[SHAPE, SHAPE])


async def test_a_matmul_executes_k_fmas_per_output(client):
    """An FP32 matmul on CUDA cores does exactly K FMAs per output element, whatever its tiling: the
    K loop's trip count (K / BLOCK_K) times its body must give that back."""
    shape = {"M": 64, "N": 256, "K": 1024}
    out = await call(
        client,
        "compile_kernel",
        kernel="matmul_tf32x3",
        impl="ieee",
        target="sm_90a",
        shape=shape,
        expect=[f"executed_ffma_per_output == {shape['K']}"],
    )
    (k,) = out["kernels"]
    (loop,) = k["loops"]
    assert loop["trip_count"] == shape["K"] // k["constexprs"]["BLOCK_K"], loop
    assert out["hypothesis_answer"]["answer"] == "supported", (
        out["summary"],
        k["executed_estimate"],
    )
