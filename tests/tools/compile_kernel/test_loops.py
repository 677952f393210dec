"""The loop finder, the TTIR trip counts and the executed estimate, on small listings whose
loops (and what they execute) can be counted by hand."""

from __future__ import annotations

import pytest

from infra_agent.tools.base import AgentError
from infra_agent.tools.compile_kernel.executed import attach
from infra_agent.tools.compile_kernel.loops import find_loops
from infra_agent.tools.compile_kernel.schema import InstructionMix, KernelResources, Occupancy
from infra_agent.tools.compile_kernel.trips import triton_loops

HEAD = '\t.section\t.text.k,"ax",@progbits\nk:\n.text.k:\n'
LINE = '\t//## File "/ws/k/k.py", line {}\n'

# One loop (k.py:10) of 2 FFMA + 1 FMUL, behind a guard that skips it; after EXIT, the
# `.L_x_2: BRA .L_x_2` trap, which branches backwards but is unreachable: not a loop.
ONE_LOOP = (
    HEAD
    + LINE.format(8)
    + """\
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P0 BRA `(.L_x_0) ;
.L_x_1:
"""
    + LINE.format(11)
    + """\
        /*0020*/                   FFMA R2, R3, R4, R2 ;
        /*0030*/                   FFMA R5, R3, R4, R5 ;
        /*0040*/                   FMUL R6, R6, R7 ;
        /*0050*/                   IADD3 R8, R8, 0x1, RZ ;
        /*0060*/                   ISETP.GE.AND P0, PT, R8, R9, PT ;
"""
    + LINE.format(10)
    + """\
        /*0070*/              @!P0 BRA `(.L_x_1) ;
.L_x_0:
"""
    + LINE.format(12)
    + """\
        /*0080*/                   FFMA R2, R5, R6, R2 ;
        /*0090*/                   STG.E desc[UR4][R10.64], R2 ;
        /*00a0*/                   EXIT ;
.L_x_2:
        /*00b0*/                   BRA `(.L_x_2);
        /*00c0*/                   NOP;
"""
)

# Nested: an outer loop (k.py:20, header 0x10) holds an inner one (k.py:21, header 0x20);
# absolute branch targets, as nvdisasm prints them without -c labels.
NESTED = (
    HEAD
    + """\
        /*0000*/                   MOV R0, RZ ;
        /*0010*/                   FMUL R1, R1, R2 ;
        /*0020*/                   FFMA R3, R3, R4, R3 ;
        /*0030*/                   ISETP.NE.AND P1, PT, R5, RZ, PT ;
"""
    + LINE.format(21)
    + """\
        /*0040*/               @P1 BRA 0x20 ;
        /*0050*/                   MUFU.EX2 R6, R6 ;
        /*0060*/                   ISETP.NE.AND P0, PT, R7, RZ, PT ;
"""
    + LINE.format(20)
    + """\
        /*0070*/               @P0 BRA 0x10 ;
        /*0080*/                   EXIT ;
"""
)

# A warp-divergent slow path: BRA.DIV jumps forward to code after EXIT, which jumps back to
# where it left. A backward branch, but its target does not dominate it: not a loop.
DIVERGENT = (
    HEAD
    + """\
        /*0000*/                   BRA.DIV UR4, `(.L_x_5) ;
        /*0010*/                   SHFL.BFLY PT, R3, R2, 0x1, 0x1f ;
.L_x_6:
        /*0020*/                   FADD R2, R2, R3 ;
        /*0030*/                   EXIT ;
.L_x_5:
        /*0040*/                   WARPSYNC 0xffffffff ;
        /*0050*/                   SHFL.BFLY PT, R3, R2, 0x1, 0x1f ;
        /*0060*/                   BRA `(.L_x_6) ;
"""
)


def test_one_loop_its_body_and_its_for_line():
    (loop,) = find_loops(ONE_LOOP)["k"]
    assert (loop.header_address, loop.end_address) == (0x20, 0x70)
    assert loop.source == "k.py:10"  # the back edge's line: the `for` statement
    assert (loop.mix["ffma"], loop.mix["fmul"], loop.mix["total"]) == (2, 1, 6)
    assert (loop.parent, loop.depth) == (None, 0)


def test_nested_loops_with_address_targets():
    outer, inner = find_loops(NESTED)["k"]
    assert (outer.header_address, outer.source, inner.header_address, inner.source) == (
        0x10,
        "k.py:20",
        0x20,
        "k.py:21",
    )
    assert (inner.parent, inner.depth, outer.depth) == (0, 1, 0)
    assert (outer.mix["ffma"], outer.mix["fmul"], outer.mix["mufu"]) == (1, 1, 1)  # inner body once
    assert (inner.mix["ffma"], inner.mix["fmul"], inner.mix["total"]) == (1, 0, 3)


def test_backward_jumps_that_do_not_loop():
    assert find_loops(DIVERGENT)["k"] == []


TTIR = """\
#loc = loc("/ws/k/k.py":1:1)
module {
  tt.func public @k(%x_ptr: !tt.ptr<f32> loc("x_ptr"(#loc)), %N: i32 loc("N"(#loc)), %M: i32 loc("M"(#loc))) {
    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %c16_i32 = arith.constant 16 : i32 loc(#loc1)
    %c3_i32 = arith.constant 3 : i32 loc(#loc1)
    %hi = arith.muli %N, %c3_i32 : i32 loc(#loc1)
    %pid = tt.get_program_id x : i32 loc(#loc1)
    %a = scf.for %i = %c0_i32 to %hi step %c16_i32 iter_args(%acc = %c0_i32) -> (i32)  : i32 {
      %b = scf.for %j = %c0_i32 to %M step %c3_i32 iter_args(%acc2 = %acc) -> (i32)  : i32 {
        scf.yield %acc2 : i32 loc(#loc3)
      } loc(#loc5)
      scf.yield %b : i32 loc(#loc2)
    } loc(#loc2)
    scf.for %k = %pid to %N step %c16_i32  : i32 {
    } loc(#loc6)
    tt.return loc(#loc1)
  } loc(#loc)
} loc(#loc)
#loc1 = loc(unknown)
#loc2 = loc("/ws/k/k.py":20:5)
#loc3 = loc("/ws/k/helper.py":7:9)
#loc4 = loc("/ws/k/k.py":21:9)
#loc5 = loc(callsite(#loc3 at #loc4))
#loc6 = loc("/ws/k/k.py":30:5)
"""


def test_trip_counts_from_the_ttir_and_the_launch_scalars():
    outer, inner, by_program = triton_loops(TTIR, {"N": 100, "M": 7})
    # range(0, 3 * 100, 16): ceil(300 / 16) = 19; range(0, 7, 3): 3 (0, 3, 6); the loop in an
    # inlined helper carries the helper's own line, as SASS line info does
    assert (outer.source, outer.trip_count) == ("k.py:20", 19)
    assert (inner.source, inner.trip_count, inner.how) == ("helper.py:7", 3, "range(0, M=7, 3)")
    assert by_program.trip_count is None and "computed in the kernel" in by_program.how
    unseen = triton_loops(TTIR, {})[0]
    assert unseen.trip_count is None and "depends on N, a kernel argument" in unseen.how


def _kernel(mix: dict) -> KernelResources:
    occ = Occupancy(
        warps_per_sm=8,
        max_warps_per_sm=64,
        blocks_per_sm=2,
        occupancy_pct=12.5,
        limiting_factor="registers",
    )
    return KernelResources(
        name="k",
        registers_per_thread=32,
        shared_memory_bytes=0,
        static_shared_memory_bytes=0,
        dynamic_shared_memory_bytes=0,
        local_memory_bytes=0,
        num_warps=4,
        threads_per_block=128,
        occupancy=occ,
        instruction_mix=InstructionMix(**mix),
    )


def test_executed_estimate_multiplies_nested_bodies():
    from infra_agent.tools.compile_kernel.sass import classify_sass

    loops = find_loops(NESTED)["k"]
    # the TTIR's outer loop (k.py:20, 19 trips) holding one of 3 trips, put on k.py:21 like the SASS's
    triton = triton_loops(TTIR.replace('helper.py":7', 'k.py":21'), {"N": 100, "M": 7})[:2]
    launch = {"grid": [10, 2, 1], "scalar_args": {"N": 100}, "outputs": {"y_ptr": 5120}}
    k = attach(_kernel(classify_sass(NESTED)["k"]), loops, triton, launch, None)
    assert [loop.trip_count for loop in k.loops] == [19, 3]
    # by hand: MOV once; outer body (FMUL, MUFU, ISETP, BRA) 19x; inner body (FFMA, ISETP, BRA) 19 * 3x; EXIT once
    ffma, fmul, mufu, total = 19 * 3, 19, 19, 2 + 4 * 19 + 3 * 19 * 3
    est = k.executed_estimate
    assert (
        est.per_thread.ffma,
        est.per_thread.fmul,
        est.per_thread.mufu,
        est.per_thread.total,
    ) == (ffma, fmul, mufu, total)
    assert est.per_thread.counts == "executed_estimate" and k.instruction_mix.counts == "static"
    # 20 programs, 5120 outputs: 256 per program; 128 threads each issue the counts above
    assert k.launch.programs == 20 and k.launch.outputs_per_program == 256
    assert est.per_output["ffma"] == pytest.approx(ffma * 128 / 256)

    given = attach(_kernel(classify_sass(NESTED)["k"]), loops, [], launch, {"k.py:20": 2, "1": 5})
    assert [(loop.trip_count, loop.trip_count_from) for loop in given.loops] == [
        (2, "given"),
        (5, "given"),
    ]
    assert given.executed_estimate.per_thread.ffma == 2 * 5
    unknown = attach(_kernel(classify_sass(NESTED)["k"]), loops, [], launch, None)
    assert unknown.executed_estimate is None and unknown.loops[0].trip_count_from == "unknown"
    with pytest.raises(AgentError, match=r"names loop '7'.*0 \(k.py:20\), 1 \(k.py:21\)"):
        attach(_kernel(classify_sass(NESTED)["k"]), loops, [], launch, {"7": 1})
