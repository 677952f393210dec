"""Replay 1, partitioned numerics: a row-parallel (K split over 4 ranks) linear under TF32 disagrees
with the FP32 linear it replaces; the tools say so, say where, and say that 3xTF32 shards fix it.

The agent's story, one tool call per step, each judged by the tool itself through `expect`:

1. Hypothesis: "the TF32 shards' all-reduced result diverges from the FP32 linear". Cheapest check:
   `check_numerics(kernel="tp_linear", impl="tf32")` at one small shape; the spec's partition runs
   every trial on 4 simulated ranks, once whole, and against the float64 reference.
   -> supported: the verdict fails on the spec's own tolerance, and the partition report names the
   split, the case and the three errors. No `partition_mismatch`: the whole (unpartitioned) call misses
   the reference as far, so the miss is the kernel's, not the split's (issue 20).
2. Which part is at fault, the split or the shards' precision? Change only the all-reduce order
   (`sum_order=[3, 1, 0, 2]`): if the split were the problem, the partitioned-vs-unpartitioned error
   would move past the tolerance; if the precision is, the unpartitioned kernel is as far off.
   -> supported: partitioned vs unpartitioned stays ~1e-7 (FP32 reordering), unpartitioned vs
   reference is ~7.7e-4 (TF32 operands): the shard arithmetic, not the partition.
3. The fix, asked the same question: `impl="tf32x3"` with step 1's expect -> contradicted, the
   verdict passes with zero findings; `compare_experiments` shows which numbers moved.

What a person should look at (one run on 2 shared CPU cores, Triton interpreter, M=16 N=32 K=256
float32, 2 trials of fresh seeded inputs; the digits move with the seed, see kernels/tp_linear/README.md):
- step 1: "FAIL: tp_linear/tf32 on shapes [M=16 N=32 K=256] x dtypes [float32]: ... rel L2 0.000785
  vs tolerance 1e-05 (spec) ... Expect: supported (2 of 2 conditions hold)"; the partition report:
  partitioned vs unpartitioned rel L2 6.78e-08, partitioned vs reference 0.000785, unpartitioned vs
  reference 0.000785 (78x the tolerance).
- step 2 (sum order [3, 1, 0, 2]): partitioned vs unpartitioned 7.6e-8, unpartitioned vs reference
  7.75e-4: supported, the split only reorders FP32 sums.
- step 3: "PASS: tp_linear/tf32x3 ... rel L2 3.81e-07 vs tolerance 1e-05 ... Expect: contradicted,
  "verdict == 'fail'" fails (pass vs fail)"; compare_experiments:
  verdict fail -> pass, partitioned vs reference ratio 4.7e-4 (the error fell ~2100x).
The whole replay costs ~15 s, most of it the sandbox's first start.
"""

import pytest
from case_study_client import agent, answers  # noqa: F401
from conftest import call

pytestmark = pytest.mark.anyio

SHAPE = [
    {"M": 16, "N": 32, "K": 256}
]  # the first of the spec's CPU shapes (kernels/tp_linear/README.md)
TOLERANCE = 1e-5  # the spec's float32 rel L2 tolerance: FP32 accumulation over K
SHARDS_DIVERGE = ["verdict == 'fail'", "partitioned_vs_reference_rel_l2 > tolerance_rel_l2"]
SPLIT_IS_INNOCENT = [
    "partitioned_vs_unpartitioned_rel_l2 <= 0.1 * tolerance_rel_l2",
    "unpartitioned_vs_reference_rel_l2 > tolerance_rel_l2",
]


async def test_tf32_shards_are_located_as_the_fault_and_3xtf32_fixes_them(agent):
    # 1. the cheapest check of the hypothesis: one shape, two trials, the spec's own partition
    tf32 = await call(
        agent,
        "check_numerics",
        kernel="tp_linear",
        impl="tf32",
        shapes=SHAPE,
        layouts=[],  # the episode as it ran: inputs as made
        trials=2,
        hypothesis="the TF32 shards' all-reduced result diverges from the FP32 linear",
        expect=SHARDS_DIVERGE,
    )
    print("step 1:", tf32["summary"], "|", tf32["findings"])
    assert tf32["hypothesis_answer"]["answer"] == "supported", tf32["hypothesis_answer"]
    assert answers(tf32) == dict.fromkeys(SHARDS_DIVERGE, "supported")
    assert (
        tf32["verdict"] == "fail" and tf32["findings"] == []
    )  # a miss both runs share: no partition finding
    (case,) = tf32["cases"]
    part = case["partition"]
    # where: the case, the split and the three errors, in the partition report
    assert case["case"] == "M=16 N=32 K=256 float32" and case["verdict"] == "fail"
    assert part["args"] == {"x": 1, "w": 1} and part["num_parts"] == 4 and part["combine"] == "sum"
    unpartitioned, split = (
        part["unpartitioned_vs_reference_rel_l2"],
        part["partitioned_vs_unpartitioned_rel_l2"],
    )
    assert unpartitioned > 10 * TOLERANCE > 100 * split
    assert case["tolerance_rel_l2"] == TOLERANCE and case["tolerance_source"] == "spec"
    # TF32 operands carry 10 mantissa bits: ~2^-10 relative error, two orders above the FP32 tolerance
    assert part["partitioned_vs_reference_rel_l2"] > 10 * TOLERANCE

    # 2. split or precision? only the all-reduce order changes
    reordered = await call(
        agent,
        "check_numerics",
        kernel="tp_linear",
        impl="tf32",
        shapes=SHAPE,
        layouts=[],  # the episode as it ran: inputs as made
        trials=2,
        partition={
            "args": {"x": 1, "w": 1},
            "num_parts": 4,
            "combine": "sum",
            "sum_order": [3, 1, 0, 2],
        },
        hypothesis="the split is innocent: the TF32 shard arithmetic alone misses FP32",
        expect=SPLIT_IS_INNOCENT,
    )
    print("step 2:", reordered["summary"], "|", reordered["cases"][0]["partition"])
    assert reordered["hypothesis_answer"]["answer"] == "supported", reordered["hypothesis_answer"]
    assert reordered["cases"][0]["partition"]["sum_order"] == [3, 1, 0, 2]
    assert reordered["findings"] == []

    # 3. the fix, asked step 1's question
    tf32x3 = await call(
        agent,
        "check_numerics",
        kernel="tp_linear",
        impl="tf32x3",
        shapes=SHAPE,
        layouts=[],  # the episode as it ran: inputs as made
        trials=2,
        hypothesis="3xTF32 shards still diverge from the FP32 linear",
        expect=SHARDS_DIVERGE,
    )
    print("step 3:", tf32x3["summary"])
    assert answers(tf32x3) == dict.fromkeys(SHARDS_DIVERGE, "contradicted")
    assert tf32x3["hypothesis_answer"]["answer"] == "contradicted"
    assert tf32x3["verdict"] == "pass" and tf32x3["findings"] == []
    fixed = tf32x3["cases"][0]["partition"]
    assert fixed["is_within_tolerance"] and fixed["partitioned_vs_reference_rel_l2"] < TOLERANCE

    # what moved between the two experiments, from the ledger
    moved = await call(
        agent, "compare_experiments", a=tf32["experiment_id"], b=tf32x3["experiment_id"]
    )
    strings = {c["field"]: (c["before"], c["after"]) for c in moved["changed_strings"]}
    numbers = {c["field"]: c["ratio"] for c in moved["numeric_changes"]}
    print("compare:", strings, {p: r for p, r in numbers.items() if "partition" in p})
    assert strings["verdict"] == ("fail", "pass")
    assert (
        numbers["cases.0.partition.partitioned_vs_reference_rel_l2"] < 0.1
    )  # the error fell by > 10x
    assert any(c["field"] == "impl" and c["after"] == "tf32x3" for c in moved["input_changes"])
