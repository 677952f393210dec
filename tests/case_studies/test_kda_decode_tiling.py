"""Replay 3, KDA decode tiled along V: the `vtiled` kernel splits V across programs for more
parallelism, but the RMSNorm over V needs the whole row, so every tile redoes the head's FP32
normalisation (and the prologue's exp/rsqrt). The tools say it is slower and show the redundant
work, once the agent reads the instruction counts per output element instead of per kernel.

The agent's story:

1. Hypothesis: "fused is faster than vtiled" (vtiled is the slower). Cheapest check:
   `microbench(impl="fused", baseline="vtiled")` at one small shape under the Triton interpreter,
   expect `ratio < 1` -> supported, verdict `faster` with the ratio's 95% CI wholly under 1. The roofline places both
   arms (same cost model: the problem's FLOPs and bytes, not the implementation's).
2. Why? `compile_kernel(target="sm_90a")` of fused, then of vtiled with `baseline=` the fused
   compile and the naive expect `mufu > baseline.mufu`, `ffma > baseline.ffma` -> contradicted: the
   raw static counts of vtiled are *smaller* (fewer registers, higher occupancy). The answer says why
   they mislead: "static counts: a loop body counts once", and vtiled has a loop at the statistic's
   `for v0 in range(0, V, BLOCK_V)` (kda_decode_triton.py:94) running V/BLOCK_V = 4 trips per program,
   while one program covers a quarter of fused's outputs (`constexprs.BLOCK_V` 128 -> 32).
3. The same compile asked about the executed estimate per output element, with the loop's trip count
   read off step 2's answer: `executed_ffma_per_output >= 4 * baseline.executed_ffma_per_output` ->
   supported; the summary says which instructions per output grew (FFMA 261 -> 1372, 5.3x; MUFU 10 ->
   40) and how much of them runs in the loop over V tiles.

What a person should look at (one run, 2 shared CPU cores; the microbench digits move with load):
- step 1 at B=1 H=1 K=4 V=64 float32: "kda_decode/fused ... median 13.54 ms ... latency-bound at
  0.0017% of the roofline. vs vtiled: faster ... ratio 0.295 [95% CI 0.291, 0.297], minimal
  detectable effect 2.0%. Expect: supported"; vtiled 45.93 ms, latency-bound at 0.0005% (the CPU
  roofline under the interpreter measures per-op overhead, not hardware; ~16 s for the whole file).
- steps 2-3 (spec example shape B=1 H=32 K=V=128): diff registers 234 -> 119, occupancy 12.5 -> 25%,
  static ffma 261 -> 139, mufu 10 -> 10, BLOCK_V 128 -> 32; one loop (kda_decode_triton.py:94, 4 trips,
  body 68 FFMA + 68 FMUL); executed per output element FFMA 261 -> 1372 (5.26x, 79% of it in the loop),
  FMUL 295 -> 1512, MUFU 10 -> 40 (4x). (The per-output static counts, 261 -> 556, said 2.1x: the
  wrong answer of issue 20, a loop body counted once.)
"""

import pytest
from case_study_client import agent, answers  # noqa: F401
from conftest import call

pytestmark = pytest.mark.anyio

SHAPE = [
    {"B": 1, "H": 1, "K": 4, "V": 64}
]  # two V tiles for vtiled (the smallest redundant case); tiny K: cheap
RAW_COUNTS_GREW = ["mufu > baseline.mufu", "ffma > baseline.ffma"]


async def test_fused_is_faster_and_both_sit_on_the_roofline(agent):
    out = await call(
        agent,
        "microbench",
        kernel="kda_decode",
        impl="fused",
        baseline="vtiled",
        shapes=SHAPE,
        hypothesis="fused (statistic once per head) is faster than vtiled",
        expect=["ratio < 1"],
    )
    print("step 1:", out["summary"])
    assert out["hypothesis_answer"]["answer"] == "supported", out["summary"]
    (shape,) = out["shapes"]
    assert out["verdict"] == shape["verdict"] == "faster"
    assert (
        shape["ci_high"] < 1 and (1 - shape["ci_high"]) * 100 > shape["min_detectable_effect_pct"]
    )
    fused, vtiled = shape["candidate"], shape["baseline"]
    assert (fused["code"], vtiled["code"]) == ("fused", "vtiled")
    assert (
        fused["spot_check"] == vtiled["spot_check"] == "passed"
    )  # timed outputs match the reference
    for arm in (fused, vtiled):  # the roofline places both, under one cost model
        print(
            f"  {arm['code']}: {arm['median_ms']:.2f} ms, {arm['bound']}, {arm['pct_of_roofline']:.2g}% of roofline"
        )
        assert arm["bound"] in ("memory", "compute", "latency") and arm["roofline_note"]
        assert arm["pct_of_roofline"] > 0 and not arm["is_impossible"]
    assert fused["pct_of_roofline"] > vtiled["pct_of_roofline"]  # same FLOPs and bytes in less time
    assert shape["flops_per_call"] > 0 and shape["bytes_per_call"] > 0


async def test_compile_shows_the_redundant_fp32_work_per_output_element(agent):
    fused = await call(agent, "compile_kernel", kernel="kda_decode", impl="fused", target="sm_90a")
    naive = await call(
        agent,
        "compile_kernel",
        kernel="kda_decode",
        impl="vtiled",
        target="sm_90a",
        baseline=fused["experiment_id"],
        expect=RAW_COUNTS_GREW,
        hypothesis="vtiled issues more MUFU and FFMA than fused",
    )
    print("step 2:", naive["summary"])
    # per kernel, the redundant work is invisible: vtiled's SASS is smaller (MUFU 10 and 10 with Triton 3.9)
    assert naive["hypothesis_answer"]["answer"] == "contradicted"
    assert answers(naive)["ffma > baseline.ffma"] == "contradicted"
    diff = {d["field"]: (d["before"], d["after"]) for d in naive["diff"]}
    block_v_fused, block_v_tiled = diff["constexprs.BLOCK_V"]
    assert block_v_tiled < block_v_fused  # ...because each program covers fewer outputs
    assert diff["instruction_mix.ffma"][1] < diff["instruction_mix.ffma"][0]

    # the answer itself says the static counts undercount: a loop, and how often it runs
    assert "static counts: a loop body counts once" in naive["summary"]
    (loop,) = naive["kernels"][0]["loops"]
    assert loop["source"].startswith("kda_decode_triton.py:") and "V=" in loop["trip_count_how"]
    trips = loop["trip_count"]
    assert trips == 4  # range(0, V=128, 32)

    executed_grew = [
        f"executed_ffma_per_output >= {trips} * baseline.executed_ffma_per_output",
        "executed_mufu_per_output > 3 * baseline.executed_mufu_per_output",
    ]
    asked = await call(
        agent,
        "compile_kernel",
        kernel="kda_decode",
        impl="vtiled",
        target="sm_90a",
        baseline=fused["experiment_id"],
        expect=executed_grew,
        hypothesis="per output element vtiled executes its FP32 statistic once per V tile",
    )
    print("step 3:", asked["summary"])
    assert asked["hypothesis_answer"]["answer"] == "supported", asked["hypothesis_answer"]
    assert asked["cached"]  # the same compile, asked a better question, costs nothing
    grew = {
        d["field"].rsplit(".", 1)[1]: d["ratio"]
        for d in asked["diff"]
        if d["field"].startswith("executed_estimate.per_output.") and (d["ratio"] or 0) > 1
    }
    print("  executed per output element grew (ratio):", grew)
    assert grew["ffma"] >= trips and grew["fmul"] >= trips and grew["mufu"] > 3
    assert (
        f"of the executed counts, loop 0 at {loop['source']} (4 trips, range(0, V=128, 32))"
        in asked["summary"]
    )  # the loop over V tiles holds the growth
    (f,), (v,) = fused["kernels"], asked["kernels"]
    assert f["spill_stores_bytes"] == v["spill_stores_bytes"] == 0  # not a spill story
