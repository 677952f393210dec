"""Compile CUDA C++ to a cubin with nvcc for a named architecture; no GPU needed.

Payload::

    {"source": "...cuda c++..." | None, "path": "/ws/k/kernel.cu" | None,
     "file_name": "kernel.cu", "arch": "sm_90a", "flags": ["-O3", "--use_fast_math"]}

Returns {"status": "ok", "ptxas_log", "resource_usage", "demangled": {mangled: name},
"files": [...]} or {"status": "setup_error" | "compile_error", "diagnostic": {...}}; the
cubin, PTX and SASS go to out_dir as kernel.{cubin,ptx,sass}.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from ..context import JobContext
from .compile import inspect_cubin
from .compile_diag import located

NVCC_TIMEOUT_S = 120
# "candidate.cu(12): error: identifier "x" is undefined"
_NVCC_ERROR = re.compile(
    r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?P<kind>error|catastrophic error): (?P<msg>.*)$"
)


def find_nvcc() -> str | None:
    for candidate in (
        shutil.which("nvcc"),
        os.environ.get("CUDA_HOME", "") + "/bin/nvcc",
        "/usr/local/cuda/bin/nvcc",
        "/opt/cuda/bin/nvcc",
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def run(payload: dict, ctx: JobContext) -> dict:
    nvcc = find_nvcc()
    if nvcc is None:
        return {
            "status": "setup_error",
            "diagnostic": {
                "message": (
                    "nvcc (the CUDA toolkit compiler) is not installed where the sandbox can see it: looked on PATH, "
                    "$CUDA_HOME/bin, /usr/local/cuda/bin, /opt/cuda/bin. Install the CUDA toolkit, or write the kernel "
                    "in Triton (language='triton'), which compiles with the toolchain inside the Triton wheel."
                )
            },
        }
    if payload.get("source") is not None:
        src = ctx.job_dir / "candidate.cu"
        src.write_text(payload["source"])
    else:
        src = Path(payload["path"])
    file_name = payload.get("file_name") or src.name
    keep = ctx.job_dir / "nvcc-keep"
    keep.mkdir(exist_ok=True)
    cubin = ctx.out_dir / "kernel.cubin"
    cmd = [
        nvcc,
        "-cubin",
        f"-arch={payload['arch']}",
        "-lineinfo",
        "-Xptxas",
        "-v",
        "--keep",
        f"--keep-dir={keep}",
        *payload.get("flags", []),
        "-o",
        str(cubin),
        str(src),
    ]
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, cwd=ctx.job_dir
        )
    except subprocess.TimeoutExpired:
        return {
            "status": "compile_error",
            "diagnostic": {
                "file": file_name,
                "message": f"nvcc did not finish within {NVCC_TIMEOUT_S} s",
            },
        }
    compile_s = time.perf_counter() - started
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not cubin.is_file():
        return {"status": "compile_error", "diagnostic": _diagnostic(log, src, file_name)}
    files = ["kernel.cubin"]
    ptx = sorted(keep.glob("*.ptx"))
    if ptx:
        shutil.copyfile(ptx[0], ctx.out_dir / "kernel.ptx")
        files.append("kernel.ptx")
    result = {
        "status": "ok",
        "compile_s": compile_s,
        "ptxas_log": log[-20000:],
        "files": files,
        "nvcc": nvcc,
        "nvcc_command": " ".join(cmd[1:]),
    }
    result.update(inspect_cubin(cubin, ctx.out_dir / "kernel.sass"))
    files.append("kernel.sass")
    result["demangled"] = _demangle(re.findall(r"Function ([\w$.]+):", result["resource_usage"]))
    return result


def _diagnostic(log: str, src: Path, file_name: str) -> dict:
    """The first error nvcc names in the agent's file, with its line; else the log tail."""
    text = src.read_text()
    for line in log.splitlines():
        m = _NVCC_ERROR.match(line.strip())
        if m and Path(m["file"]).name == src.name:
            diag = located(file_name, text, int(m["line"]), None, m["msg"])
            diag["compiler_output"] = log[-4000:]
            return diag
    return {
        "file": file_name,
        "line": None,
        "column": None,
        "message": log[-4000:].strip() or "nvcc failed",
    }


def _demangle(names: list[str]) -> dict[str, str]:
    """C++ names as written (saxpy(float, float const*, float*, int)), via c++filt if present."""
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool or not names:
        return {}
    try:
        out = subprocess.run(
            [tool], input="\n".join(names), capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {m: d for m, d in zip(names, out.splitlines()) if d and d != m}
