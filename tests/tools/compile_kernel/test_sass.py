"""Parsers and the occupancy table, on compiler output captured from real compiles."""

from __future__ import annotations

from infra_agent.tools.compile_kernel.occupancy import LIMITS, TARGETS, occupancy
from infra_agent.tools.compile_kernel.report import describe_changes, diff
from infra_agent.tools.compile_kernel.sass import (
    classify_amdgcn,
    classify_sass,
    parse_amdgcn_metadata,
    parse_ptxas_log,
    parse_resource_usage,
)
from infra_agent.tools.compile_kernel.schema import KernelResources

PTXAS_LOG = """\
ptxas-blackwell info    : 0 bytes gmem
ptxas-blackwell info    : Compiling entry function 'spill_kernel' for 'sm_90a'
ptxas-blackwell info    : Function properties for spill_kernel
    4600 bytes stack frame, 7020 bytes spill stores, 9028 bytes spill loads
ptxas-blackwell info    : Used 168 registers, used 0 barriers, 4600 bytes cumulative stack size
ptxas info    : Compiling entry function '_Z5saxpyfPKfPfi' for 'sm_90a'
ptxas info    : Function properties for _Z5saxpyfPKfPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers
"""

RESOURCE_USAGE = """
Resource usage:
 Common:
  GLOBAL:28 CONSTANT[4]:16
 Function rmsnorm_kernel:
  REG:30 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:584 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z5spillPfPKii:
  REG:32 STACK:1024 SHARED:0 LOCAL:8 CONSTANT[0]:548 TEXTURE:0 SURFACE:0 SAMPLER:0
"""

SASS = """\
	.section	.text.k,"ax",@progbits
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0170*/              @!P1 LDG.E.128 R4, desc[UR8][R14.64] ;
        /*0180*/                   LDG.E R8, desc[UR8][R12.64] ;
        /*0190*/                   LDG.E.U16 R9, desc[UR8][R12.64] ;
        /*01a0*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], RZ, !UPT ;
        /*01b0*/                   FFMA R17, R4, R4, R17 ;
        /*01c0*/                   STL [R1], R3 ;
        /*01d0*/                   LDL R3, [R1] ;
        /*01e0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*01f0*/                   MUFU.RSQ R5, R5 ;
        /*0200*/                   STG.E.64 desc[UR8][R2.64], R4 ;
        /*0210*/                   NOP ;
        /*0220*/                   HFMA2.MMA R7, -RZ, RZ, 0, 0 ;
        /*0230*/                   HFMA2.MMA R9, -RZ, RZ, 1.875, 0 ;
        /*0240*/                   IMAD.MOV.U32 R11, RZ, RZ, c[0x0][0x210] ;
        /*0250*/                   MOV R13, 0x3f800000 ;
        /*0260*/                   HFMA2 R4, R4.H0_H0, R6.H0_H0, R8 ;
        /*0270*/                   HFMA2.MMA R10, R4, R6, -RZ ;
"""

AMDGCN = """\
matmul_kernel:                          ; @matmul_kernel
	global_load_dwordx4 v[2:5], v[0:1], off
	ds_write_b64 v6, v[2:3]
	s_barrier
	ds_read_b64 v[8:9], v7
	v_mfma_f32_32x32x8_f16 a[0:15], v[8:9], v[10:11], a[0:15]
	scratch_store_dword off, v1, s0
	global_store_short v[0:1], v2, off
	s_endpgm
.Lfunc_end0:
amdhsa.kernels:
  - .agpr_count:     16
    .group_segment_fixed_size: 512
    .private_segment_fixed_size: 4
    .sgpr_count:     26
    .sgpr_spill_count: 0
    .vgpr_count:     206
    .vgpr_spill_count: 3
; Occupancy: 2
"""


def test_ptxas_log_gives_registers_and_spills_per_function():
    log = parse_ptxas_log(PTXAS_LOG)
    assert log["spill_kernel"] == {
        "stack_frame_bytes": 4600,
        "spill_stores_bytes": 7020,
        "spill_loads_bytes": 9028,
        "registers": 168,
        "barriers": 0,
    }
    assert log["_Z5saxpyfPKfPfi"]["registers"] == 10 and log["_Z5saxpyfPKfPfi"]["barriers"] == 1


def test_resource_usage_per_function():
    usage = parse_resource_usage(RESOURCE_USAGE)
    assert usage["rmsnorm_kernel"]["REG"] == 30 and usage["rmsnorm_kernel"]["SHARED"] == 1024
    assert usage["_Z5spillPfPKii"]["STACK"] == 1024 and usage["_Z5spillPfPKii"]["LOCAL"] == 8


def test_sass_classes_and_widths():
    mix = classify_sass(SASS)["k"]
    assert mix["tensor_core_mma"] == 1 and mix["tensor_core_ops"] == {"HGMMA.64x128x16.F32": 1}
    assert mix["global_load"] == 3 and mix["global_load_bits"] == {"128": 1, "32": 1, "16": 1}
    assert mix["global_store_bits"] == {"64": 1}
    assert (mix["local_load"], mix["local_store"], mix["barrier"], mix["mufu"], mix["ffma"]) == (
        1,
        1,
        1,
        1,
        1,
    )
    assert mix["total"] == 17  # NOP not counted
    # the zero/constant idiom and IMAD.MOV are moves; HFMA2 on registers is half math
    assert mix["move"] == 4 and mix["half_fma"] == 2


def test_amdgcn_metadata_and_mix():
    md = parse_amdgcn_metadata(AMDGCN)
    assert md == {
        "vgpr_count": 206,
        "sgpr_count": 26,
        "agpr_count": 16,
        "vgpr_spill_count": 3,
        "sgpr_spill_count": 0,
        "lds_static_bytes": 512,
        "scratch_bytes_per_lane": 4,
        "compiler_waves_per_simd": 2,
    }
    mix = classify_amdgcn(AMDGCN)
    assert mix["tensor_core_mma"] == 1 and mix["global_load_bits"] == {"128": 1}
    assert mix["global_store_bits"] == {"16": 1}
    assert (mix["shared_load"], mix["shared_store"], mix["local_store"], mix["barrier"]) == (
        1,
        1,
        1,
        1,
    )


def test_occupancy_limits():
    # 30 regs x 16 warps on sm_90: registers allow 4 blocks of 16 warps = 64 = the warp ceiling
    full = occupancy(
        "sm_90",
        registers_per_thread=30,
        shared_bytes_per_block=1088,
        warps_per_block=16,
        warp_size=32,
    )
    assert full["occupancy_pct"] == 100.0 and full["limiting_factor"] == "warps"
    # 255 regs: 255*32 -> 8192 per warp, 2 per 16K file, 8 per SM
    regs = occupancy(
        "sm_90", registers_per_thread=255, shared_bytes_per_block=0, warps_per_block=4, warp_size=32
    )
    assert (regs["warps_per_sm"], regs["limiting_factor"]) == (8, "registers")
    smem = occupancy(
        "sm_80",
        registers_per_thread=32,
        shared_bytes_per_block=100 * 1024,
        warps_per_block=4,
        warp_size=32,
    )
    assert (smem["blocks_per_sm"], smem["limiting_factor"]) == (1, "shared_memory")
    too_big = occupancy(
        "sm_86",
        registers_per_thread=32,
        shared_bytes_per_block=120 * 1024,
        warps_per_block=4,
        warp_size=32,
    )
    assert too_big["blocks_per_sm"] == 0 and too_big["occupancy_pct"] == 0
    # AMD: 206 VGPRs -> 208 -> 2 waves per SIMD, as the compiler's own "Occupancy: 2" says
    amd = occupancy(
        "gfx942",
        registers_per_thread=206,
        shared_bytes_per_block=0,
        warps_per_block=4,
        warp_size=64,
    )
    assert amd["warps_per_sm"] == 8 and amd["limiting_factor"] == "registers"
    assert all(t.family in LIMITS for t in TARGETS.values())


def _resources(**over) -> KernelResources:
    base = dict(
        name="k",
        registers_per_thread=40,
        shared_memory_bytes=1024,
        static_shared_memory_bytes=1024,
        dynamic_shared_memory_bytes=0,
        local_memory_bytes=0,
        stack_frame_bytes=0,
        spill_stores_bytes=0,
        spill_loads_bytes=0,
        num_warps=4,
        threads_per_block=128,
        occupancy={
            "warps_per_sm": 64,
            "max_warps_per_sm": 64,
            "blocks_per_sm": 16,
            "occupancy_pct": 100.0,
            "limiting_factor": "warps",
        },
        instruction_mix={"ffma": 10, "total": 100},
    )
    return KernelResources(**{**base, **over})


def test_diff_lists_only_what_moved():
    a = _resources()
    b = _resources(
        registers_per_thread=24,
        instruction_mix={
            "ffma": 10,
            "total": 108,
            "tensor_core_mma": 8,
            "tensor_core_ops": {"HGMMA.64x64x16.F32": 8},
        },
    )
    changes = {c.field: c for c in diff(a, b)}
    assert changes["registers_per_thread"].delta == -16
    assert changes["instruction_mix.tensor_core_mma"].before == 0
    assert changes["instruction_mix.tensor_core_ops.HGMMA.64x64x16.F32"].after == 8
    assert "instruction_mix.ffma" not in changes
    text = describe_changes(diff(a, b))
    assert "-16 regs" in text and "tensor-core MMA 0→8" in text
    assert diff(a, a) == [] and describe_changes([]) == "no change"


def test_default_target_follows_the_local_gpu(monkeypatch):
    import subprocess

    from infra_agent.tools.compile_kernel import occupancy as occ

    def fake_run(cmd, **kwargs):
        out = {"nvidia-smi": "9.0\n9.0\n", "rocm_agent_enumerator": "gfx000\ngfx942\n"}[cmd[0]]
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    monkeypatch.setattr(occ.subprocess, "run", fake_run)
    monkeypatch.setattr(
        occ.shutil, "which", lambda name: "/usr/bin/" + name if name == "nvidia-smi" else None
    )
    assert occ.local_target() == "sm_90a"  # Hopper: the arch-specific variant Triton uses
    monkeypatch.setattr(
        occ.shutil, "which", lambda name: "/opt/rocm/bin/" + name if name != "nvidia-smi" else None
    )
    assert occ.local_target() == "gfx942"  # gfx000 is the CPU agent
    monkeypatch.setattr(occ.shutil, "which", lambda name: None)
    assert occ.local_target() is None
