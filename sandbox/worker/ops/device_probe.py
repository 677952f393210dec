"""Op 'device_probe': what the worker sees of the machine. Raw facts, no judgement.

Runs inside the sandbox so the answer describes the environment agent code will run
in (its torch, its devices, its CPU affinity), which may differ from the server's.
"""

from __future__ import annotations

import os
import platform
import sys

from ..context import JobContext
from ..shared import cpu_model
from .peaks import fingerprint


def run(payload: dict, ctx: JobContext) -> dict:
    import numpy
    import torch
    import triton

    facts: dict = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "num_cpus": os.cpu_count(),
        "num_cpus_usable": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": getattr(torch.version, "hip", None),
        "torch_num_threads": torch.get_num_threads(),
        "triton": triton.__version__,
        "numpy": numpy.__version__,
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "") == "1",
        "job_device": ctx.device,
        "cuda_available": torch.cuda.is_available(),
        "devices": [],
    }
    if facts["cuda_available"]:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            facts["devices"].append(
                {
                    "index": index,
                    "name": props.name,
                    "capability": f"{props.major}.{props.minor}",
                    "total_memory_bytes": int(props.total_memory),
                    "multi_processor_count": int(props.multi_processor_count),
                }
            )
        facts["cudnn"] = torch.backends.cudnn.version()
    # the key measured ceilings are cached under (tools/common/peaks.py), so device_info can
    # show them without measuring
    facts["peaks_fingerprint"] = fingerprint(ctx.device)
    return facts
