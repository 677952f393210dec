"""GPU host check for profile (needs CUDA; about 1-2 minutes on an H100/H200, well under 5).

1. A zoo kernel (rmsnorm, Triton) at a GPU shape through the MCP tool and the sandbox: CUDA
   kernel rows from CUPTI (`gpu_kernels`) must be there, the Triton kernel among them, and the
   CPU op table must still name the launch.
2. A workload whose two threads each launch CUDA work inside their own range: both threads'
   ranges and CUDA kernels are seen (profile_all_threads covers GPU launches from other
   threads), and the overlap between the two range sets is reported.
3. Nsight Compute: whether `ncu` is installed and whether this host lets a non-admin read the
   GPU's performance counters (RmProfilingAdminOnly); profile does not run ncu itself yet, so
   this says what a next step can count on.

    python scripts/gpu_profile_check.py [--allow-unsandboxed]

Exit status 0 when 1 and 2 hold; 3 is reported, never a failure.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

TWO_STREAMS = """
import threading
import torch
from ia_worker.ranges import span

def step():
    a = torch.randn(4096, 4096, device="cuda")
    def work(name):
        with span(name):
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
    threads = [threading.Thread(target=work, args=(n,), name=n) for n in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
"""


async def check(allow_unsandboxed: bool) -> bool:
    from mcp import Client

    from infra_agent.kernels.workspace import EMBEDDED_ROOT
    from infra_agent.server.app import build_server

    ok = True
    with tempfile.TemporaryDirectory(prefix="gpu-profile-") as tmp:
        ws = Path(tmp) / "ws"
        shutil.copytree(EMBEDDED_ROOT, ws, ignore=shutil.ignore_patterns("__pycache__"))
        server = build_server(ws, allow_unsandboxed=allow_unsandboxed)
        async with Client(server) as client:
            kernel = await _call(
                client,
                kernel="rmsnorm",
                impl="triton",
                shape={"M": 4096, "N": 4096},
                calls=20,
                sample_threads=False,
            )
            names = [k["name"] for k in kernel["gpu_kernels"]]
            print(
                "1. rmsnorm (triton) CUDA kernels:", kernel["gpu_kernels"][:3], kernel["gpu_note"]
            )
            ok &= _expect(
                any("rmsnorm" in n for n in names),
                "the Triton rmsnorm kernel is among the CUPTI rows",
            )
            threads = await _call(
                client, source=TWO_STREAMS, entry="step", overlap=[["left", "right"]]
            )
            print(
                "2. two threads:",
                [(r["name"], r["threads"], r["count"]) for r in threads["ranges"]],
                threads["overlaps"][0],
                [k["name"][:40] for k in threads["gpu_kernels"][:3]],
            )
            ok &= _expect(
                {r["name"] for r in threads["ranges"]} == {"left", "right"},
                "both threads' ranges seen",
            )
            ok &= _expect(
                bool(threads["gpu_kernels"]), "GEMM kernels launched from worker threads recorded"
            )
        await server.aclose()
    print("3. Nsight Compute:", ncu_status())
    return ok


async def _call(client, **args) -> dict:
    result = await client.call_tool("profile", args)
    if result.is_error:
        raise SystemExit(f"profile failed: {result.content[0].text}")
    return result.structured_content


def _expect(condition: bool, what: str) -> bool:
    print(("   ok: " if condition else "   FAILED: ") + what)
    return condition


def ncu_status() -> str:
    ncu = shutil.which("ncu") or next(
        (str(p) for p in Path("/usr/local/cuda/bin").glob("ncu")), None
    )
    if ncu is None:
        return "ncu not installed (Nsight Compute ships with the CUDA toolkit)"
    params = Path("/proc/driver/nvidia/params")
    admin_only = "RmProfilingAdminOnly: 1" in params.read_text() if params.is_file() else None
    version = subprocess.run(
        [ncu, "--version"], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    counters = {
        True: "performance counters restricted to admins (RmProfilingAdminOnly=1): run as root or set "
        "NVreg_RestrictProfilingToAdminUsers=0",
        False: "counters readable by all users",
        None: "counter permission unknown (no /proc/driver/nvidia/params)",
    }[admin_only]
    return f"{version.splitlines()[-1] if version else ncu}; {counters}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--allow-unsandboxed", action="store_true")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check is for a GPU host")
    sys.exit(0 if anyio.run(check, args.allow_unsandboxed) else 1)


if __name__ == "__main__":
    main()
