"""What compile and run jobs need works inside the sandbox: nvcc and its gcc, Triton's
bundled ptxas/cuobjdump/nvdisasm, Triton's interpreter, and a per-job Triton cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sandbox_helpers import sandbox  # noqa: F401  (the fixture)

TOOLS = """
import os, subprocess, triton
def main():
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    out = {}
    for name, cmd in {"nvcc": ["nvcc", "--version"], "gcc": ["gcc", "--version"],
                      "ptxas": [bin_dir + "/ptxas", "--version"], "cuobjdump": [bin_dir + "/cuobjdump", "--version"],
                      "nvdisasm": [bin_dir + "/nvdisasm", "--version"]}.items():
        try:
            out[name] = subprocess.run(cmd, capture_output=True).returncode
        except OSError as e:
            out[name] = str(e)
    with open("k.cu", "w") as f:
        f.write("__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\\n")
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", "out/k.cubin", "k.cu"], capture_output=True,
                          text=True)
    out["nvcc_cubin"] = [proc.returncode, proc.stderr[-400:]]
    return out
"""


def test_compilers_run_inside(sandbox):
    if shutil.which("nvcc") is None or shutil.which("gcc") is None:
        pytest.skip("nvcc or gcc is not installed on this host")
    res = sandbox.probe(TOOLS, timeout_s=180)
    assert res.ok, (res.error, res.stderr_tail)
    out = res.result["value"]
    assert {k: out[k] for k in ("nvcc", "gcc", "ptxas", "cuobjdump", "nvdisasm")} == dict.fromkeys(
        ("nvcc", "gcc", "ptxas", "cuobjdump", "nvdisasm"), 0
    ), out
    assert out["nvcc_cubin"][0] == 0, out["nvcc_cubin"]
    assert (res.out_dir / "k.cubin").stat().st_size > 0


TRITON = """
import os
import torch
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

def main(mode):
    result = {"cache": os.environ["TRITON_CACHE_DIR"]}
    if mode == "interpret":  # TRITON_INTERPRET=1: the kernel runs on the CPU
        x, y = torch.arange(100.0), torch.ones(100)
        out = torch.empty(100)
        add_kernel[(2,)](x, y, out, 100, BLOCK=64)
        result["correct"] = bool(torch.equal(out, x + 1))
    if mode == "compile":  # ahead-of-time for an H100, no GPU needed; lands in the job's own cache
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        src = ASTSource(fn=add_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                        constexprs={"BLOCK": 64})
        result["ptx"] = "ptx" in triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm
    result["cache_files"] = sum(len(files) for _, _, files in os.walk(result["cache"]))
    return result
"""


def test_triton_interpreter_and_per_job_cache(sandbox):
    res = sandbox.probe(TRITON, "interpret", env={"TRITON_INTERPRET": "1"}, timeout_s=180)
    assert res.ok and res.result["value"]["correct"], (res.error, res.stderr_tail)
    # a CPU host interprets Triton in every run job (policy.job_env); this probe compiles ahead of time
    res = sandbox.probe(TRITON, "compile", env={"TRITON_INTERPRET": "0"}, timeout_s=180)
    assert res.ok, (res.error, res.stderr_tail)
    out = res.result["value"]
    assert out["ptx"] and out["cache"].endswith("/cache/triton") and out["cache_files"] > 0
    host_cache = res.out_dir.parent / "cache" / "triton"
    assert any(
        host_cache.rglob("*.ptx")
    )  # the compile wrote into this job's folder, nowhere shared
    again = sandbox.probe(TRITON, "look", timeout_s=60)
    assert (
        again.ok and again.result["value"]["cache_files"] == 0
    )  # the next job starts with an empty cache


@pytest.mark.gpu
def test_gpu_visible_inside(sandbox):
    if not Path("/dev/nvidia0").exists():
        pytest.skip("no NVIDIA GPU on this host (/dev/nvidia0 missing)")
    res = sandbox.probe(
        """
        import torch
        def main():
            x = torch.ones(1024, device="cuda")
            return {"available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
                    "sum": float(x.sum()), "name": torch.cuda.get_device_name(0)}
        """,
        timeout_s=120,
    )
    assert res.ok, (res.error, res.stderr_tail)
    assert res.result["value"]["available"] and res.result["value"]["sum"] == 1024.0
