"""compile_kernel on CPU: real Triton AOT / nvcc compiles for NVIDIA and AMD targets.

The compile matrix runs the worker ops in this process (the sandbox adds nothing to
what the compiler says, and one import of Triton serves every case); compiles are
shared through module-scoped fixtures. The calls through the MCP server and the
sandbox (caching, baselines, expect, bad input) are in test_compile_kernel_tool.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest
from compile_matmul import KERNELS, matmul_payload

from infra_agent.kernels.workspace import EMBEDDED_ROOT, load_workspace
from infra_agent.sandbox.worker.context import JobContext
from infra_agent.tools.compile_kernel.judge import amd_kernels, nvidia_kernels
from infra_agent.tools.compile_kernel.occupancy import TARGETS
from infra_agent.tools.compile_kernel.plan import plan_target_payload
from infra_agent.tools.compile_kernel.report import format_diagnostic, notes


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    """compile(op, payload) -> (raw, out_dir), run in-process, memoised per payload."""
    from infra_agent.sandbox.worker.ops import compile as triton_op
    from infra_agent.sandbox.worker.ops import compile_cuda as cuda_op

    done: dict[str, tuple[dict, Path]] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TRITON_INTERPRET", raising=False)
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        mp.setenv("TRITON_HOME", str(tmp_path_factory.mktemp("triton-home")))
        # as a job's own tmp/: nvcc's cicc leaves a 0-byte candidate-*.lgenfe.bc in TMPDIR
        mp.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmp")))

        def compile_(payload: dict, op: str = "compile") -> tuple[dict, Path]:
            key = repr((op, sorted(payload.items(), key=str)))
            if key not in done:
                job = tmp_path_factory.mktemp("job")
                (job / "in").mkdir()
                (job / "out").mkdir()
                ctx = JobContext(
                    job_dir=job,
                    in_dir=job / "in",
                    out_dir=job / "out",
                    workspace=None,
                    device="cpu",
                )
                module = cuda_op if op == "compile_cuda" else triton_op
                done[key] = (module.run(payload, ctx), job / "out")
            return done[key]

        yield compile_


def spec_payload(kernel: str, target: str, **extra) -> dict:
    ws = load_workspace(EMBEDDED_ROOT)
    k = ws.kernel(kernel)
    file, fn = k.spec.impls["triton"].split(":")
    launch = {
        "launcher": fn,
        "args": [asdict(a) for a in k.spec.args],
        "shape": k.spec.shapes["gpu"][0],
        "dtype": "float16",
    }
    return {
        "path": str(k.folder / file),
        "file_name": f"{kernel}/{file}",
        "entry": None,
        "target": plan_target_payload(TARGETS[target]),
        "launch": launch,
        "options": {},
        **extra,
    }


def judge(raw: dict, out: Path, target: str):
    t = TARGETS[target]
    assert raw["status"] == "ok", raw
    return amd_kernels(raw, out, t) if t.backend == "hip" else nvidia_kernels(raw, out, t, 256)


def cuobjdump_usage(cubin: Path) -> dict[str, dict[str, int]]:
    """Independent of tools/compile_kernel/sass.py: run cuobjdump here and read its fields."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    text = subprocess.run(
        [str(tool), "--dump-resource-usage", str(cubin)], capture_output=True, text=True, check=True
    ).stdout
    return {
        name: {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", fields)}
        for name, fields in re.findall(r"Function ([\w$]+):\s*\n\s*(.*)", text)
    }


# ---- the compile matrix ---------------------------------------------------------------


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "sm_100a", "gfx942"])
@pytest.mark.parametrize("kernel", ["rmsnorm", "vector_add"])
def test_builtin_kernels_compile_for_each_target(compiler, kernel, target):
    raw, out = compiler(spec_payload(kernel, target))
    (k,) = judge(raw, out, target)
    assert k.name == f"{kernel}_kernel"
    assert 0 < k.registers_per_thread <= 255
    assert k.signature["x_ptr"] == "*fp16"  # inferred from the spec's example dtype
    assert k.occupancy.warps_per_sm > 0 and k.instruction_mix.global_load > 0
    ir = {"ttir", "ttgir", "llir"} | ({"amdgcn"} if target == "gfx942" else {"ptx", "sass"})
    assert ir <= {name.split(".")[1] for name in raw["files"]}
    if target != "gfx942":
        # the launch was inferred with 16-byte aligned pointers, so loads vectorise as on a GPU
        assert set(k.instruction_mix.global_load_bits) == {"128"}


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_registers_and_spills_match_cuobjdump(compiler, target):
    raw, out = compiler(spec_payload("rmsnorm", target))
    (k,) = judge(raw, out, target)
    usage = cuobjdump_usage(out / "kernel.cubin")["rmsnorm_kernel"]
    assert k.registers_per_thread == usage["REG"]
    assert k.stack_frame_bytes == usage["STACK"] and k.local_memory_bytes == usage["LOCAL"]
    assert k.static_shared_memory_bytes == usage["SHARED"]
    assert k.spill_stores_bytes == 0 and k.spill_loads_bytes == 0


SPILL = {
    "source": (KERNELS / "spill.py").read_text(),
    "entry": "spill_kernel",
    "signature": {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "i32"},
    "constexprs": {"BLOCK": 4096},
    "options": {"num_warps": 1},
}


def test_kernel_written_to_spill_shows_spills_and_local_memory(compiler):
    raw, out = compiler({**SPILL, "target": plan_target_payload(TARGETS["sm_90a"])})
    (k,) = judge(raw, out, "sm_90a")
    usage = cuobjdump_usage(out / "kernel.cubin")["spill_kernel"]
    assert k.spill_stores_bytes > 0 and k.spill_loads_bytes > 0
    assert k.registers_per_thread == usage["REG"] and k.stack_frame_bytes == usage["STACK"] > 0
    assert k.instruction_mix.local_store > 0 and k.instruction_mix.local_load > 0
    assert k.occupancy.limiting_factor in ("registers", "warps")


def test_tl_dot_uses_tensor_cores_on_sm_90a(compiler):
    raw, out = compiler(matmul_payload("sm_90a", 64, 64, 32))
    (k,) = judge(raw, out, "sm_90a")
    assert k.instruction_mix.tensor_core_mma > 0
    assert any(op.startswith("HGMMA") for op in k.instruction_mix.tensor_core_ops)
    assert k.dynamic_shared_memory_bytes > 0  # operands staged through shared memory


@pytest.mark.parametrize(
    "name, line, column, words",
    [
        ("syntax_error.py", 9, None, "SyntaxError"),
        ("type_error.py", 11, 9, "ranks"),  # tl.dot of two 1-D tensors
        ("nested_error.py", 7, 12, ">= 2 (called from line 14)"),  # inside a @triton.jit helper
    ],
)
def test_errors_point_at_the_agents_line(compiler, name, line, column, words):
    source = (KERNELS / name).read_text()
    raw, _ = compiler(
        {
            "source": source,
            "signature": {"x_ptr": "*fp32", "N": "i32"},
            "constexprs": {"BLOCK": 16},
            "entry": None if name != "nested_error.py" else "nested_kernel",
            "target": plan_target_payload(TARGETS["sm_90a"]),
        }
    )
    diag = raw["diagnostic"]
    assert raw["status"] in ("source_error", "compile_error")
    assert diag["line"] == line and (column is None or diag["column"] == column)
    assert words in diag["message"]
    text = format_diagnostic(raw["status"], diag)
    assert text.startswith(f"candidate.py:{line}:")
    assert source.splitlines()[line - 1].strip() in text  # the excerpt shows the failing line
    assert "triton/" not in text  # no frames from inside Triton


def test_autotuned_launcher_compiles_first_config_or_overrides(compiler):
    launch = {
        "launcher": "vector_add",
        "args": [{"name": "x", "shape": ["N"]}, {"name": "y", "shape": ["N"]}],
        "shape": {"N": 4096},
        "dtype": "float32",
    }
    base = {
        "source": (KERNELS / "autotuned.py").read_text(),
        "launch": launch,
        "target": plan_target_payload(TARGETS["sm_80"]),
    }
    raw, out = compiler(base)
    (k,) = judge(raw, out, "sm_80")
    assert (k.name, k.constexprs, k.num_warps) == ("add_kernel", {"BLOCK": 128}, 4)
    raw, out = compiler({**base, "constexprs": {"BLOCK": 256}, "options": {"num_warps": 8}})
    (k,) = judge(raw, out, "sm_80")
    assert (k.constexprs, k.num_warps) == ({"BLOCK": 256}, 8)


def test_a_block_that_cannot_launch_is_called_out(compiler, tmp_path):
    raw, out = compiler(spec_payload("rmsnorm", "sm_80"))
    (k,) = judge(raw, out, "sm_80")
    assert notes(raw, out, [k]) == []
    huge = k.model_copy(
        update={
            "occupancy": k.occupancy.model_copy(
                update={
                    "blocks_per_sm": 0,
                    "warps_per_sm": 0,
                    "occupancy_pct": 0.0,
                    "limiting_factor": "shared_memory",
                }
            )
        }
    )
    (note,) = notes(raw, out, [huge])
    assert "cannot launch" in note and "OutOfResources" in note


def test_missing_entry_and_missing_module(compiler):
    target = plan_target_payload(TARGETS["sm_90a"])
    raw, _ = compiler({**SPILL, "entry": "nope", "target": target})
    assert raw["status"] == "setup_error" and "spill_kernel" in raw["diagnostic"]["message"]
    raw, _ = compiler(
        {
            "source": "import triton\nimport not_a_module_xyz\n",
            "signature": {"x": "i32"},
            "target": target,
        }
    )
    assert raw["status"] == "source_error" and raw["diagnostic"]["line"] == 2
    assert "not_a_module_xyz" in raw["diagnostic"]["message"]


def test_mlir_errors_on_stderr_are_named():
    from infra_agent.sandbox.worker.ops.compile_diag import mlir_diagnostic

    stderr = (
        "/venv/lib/python3.11/site-packages/triton/language/standard.py:314:12: error: 'tt.splat' op "
        "requires the same element type for all operands and results\n"
        "/jobs/j1/candidate.py:6:1: error: Failures have been detected while processing an MLIR pass pipeline\n"
    )
    text = "import triton\n\n\n\n@triton.jit\ndef k(x_ptr):\n    pass\n"
    diag = mlir_diagnostic(
        stderr,
        RuntimeError("PassManager::run failed"),
        Path("/jobs/j1/candidate.py"),
        "candidate.py",
        text,
    )
    assert (diag["line"], diag["column"]) == (6, 1)
    assert (
        "'tt.splat' op requires" in diag["message"]
        and "triton/language/standard.py:314" in diag["message"]
    )


CUDA_SRC = (KERNELS / "kernels.cu").read_text()
needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
    reason="nvcc (CUDA toolkit) not installed",
)


@needs_nvcc
def test_cuda_cpp_compiles_through_nvcc(compiler):
    raw, out = compiler({"source": CUDA_SRC, "arch": "sm_90a", "flags": []}, op="compile_cuda")
    kernels = {k.name.split("(")[0]: k for k in judge(raw, out, "sm_90a")}
    usage = cuobjdump_usage(out / "kernel.cubin")
    assert set(kernels) == {"saxpy", "local_array"}
    assert kernels["saxpy"].registers_per_thread == usage["_Z5saxpyfPKfPfi"]["REG"] > 0
    # a per-thread array indexed at run time lives in local memory: stack frame, LDL/STL
    local = kernels["local_array"]
    assert local.stack_frame_bytes == usage["_Z11local_arrayPfPKii"]["STACK"] >= 1024
    assert local.instruction_mix.local_load > 0 and local.instruction_mix.local_store > 0


@needs_nvcc
def test_cuda_cpp_error_names_the_line(compiler):
    raw, _ = compiler(
        {
            "source": "__global__ void k(float* x) {\n  x[0] = undefined_thing;\n}\n",
            "arch": "sm_80",
            "flags": [],
        },
        op="compile_cuda",
    )
    assert raw["status"] == "compile_error" and raw["diagnostic"]["line"] == 2
    assert "undefined_thing" in raw["diagnostic"]["message"]


def _compiler_numbers(amdgcn: str) -> dict[str, int]:
    """Independent of tools/compile_kernel/sass.py: the compiler's own comments and metadata."""

    def one(pattern: str) -> int:
        (value,) = {int(v) for v in re.findall(pattern, amdgcn)}
        return value

    return {
        "total_vgprs": one(r";\s*TotalNumVgprs:\s*(\d+)"),
        "agprs": one(r";\s*NumAgprs:\s*(\d+)"),
        "vgpr_count": one(r"\.vgpr_count:\s+(\d+)"),
        "waves_per_simd": one(r";\s*Occupancy:\s*(\d+)"),
    }


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_amd_registers_and_occupancy_are_the_compilers_own(compiler, target):
    # issue 34: a 256x256 MFMA tile keeps its accumulators in AGPRs; on these targets the
    # register file is unified and .vgpr_count already counts them, so adding .agpr_count
    # again counted them twice (768 registers, occupancy 0%)
    raw, out = compiler(matmul_payload(target, 256, 256, 32))
    (k,) = judge(raw, out, target)
    truth = _compiler_numbers((out / "kernel.amdgcn").read_text())
    assert truth["agprs"] > 0 and k.instruction_mix.tensor_core_mma > 0  # the case at hand
    assert k.registers_per_thread == truth["total_vgprs"] == truth["vgpr_count"]
    # the compiler counts waves per SIMD; a CU has 4 SIMDs and holds at most 32 waves
    assert k.occupancy.warps_per_sm == 4 * truth["waves_per_simd"]
    assert k.occupancy.occupancy_pct == pytest.approx(100 * 4 * truth["waves_per_simd"] / 32)
