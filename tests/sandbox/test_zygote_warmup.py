"""What the zygote imports before forking is what its jobs do not pay for, each, again."""

import json
import os
import subprocess
import sys

from infra_agent.kernels.workspace import EMBEDDED_ROOT

# In a fresh interpreter: the zygote's warm-up, then what a job of the CPU host does with a
# Triton kernel (load it, launch it once under TRITON_INTERPRET=1): the modules that launch
# imported. `skip_launch_warmup` is the zygote without its Triton launch warm-up.
JOB = """
import importlib.util, json, sys
from infra_agent.sandbox.worker import zygote
if {skip_launch_warmup}:
    zygote._warm_triton_launch = lambda: None
zygote._warm_imports()
import torch
before = set(sys.modules)
spec = importlib.util.spec_from_file_location("candidate", {kernel!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
x = torch.rand(64)
module.vector_add(x, x)
print(json.dumps(sorted(set(sys.modules) - before - {{"candidate"}})))
"""


def _imported_by_first_launch(skip_launch_warmup: bool) -> list[str]:
    kernel = str(EMBEDDED_ROOT / "vector_add" / "vector_add_triton.py")
    out = subprocess.run(
        [sys.executable, "-c", JOB.format(skip_launch_warmup=skip_launch_warmup, kernel=kernel)],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_a_job_s_first_triton_launch_imports_nothing_the_zygote_did_not():
    """Every check_numerics case, microbench and profile job launches a Triton kernel in a
    child forked for it; the first launch in a process specialises its arguments, which imports
    Triton's code generator and Gluon (~50 modules, ~40 ms of CPU per job:
    bench/zygote_first_launch.py). The zygote does it once, so the child imports nothing."""
    assert _imported_by_first_launch(skip_launch_warmup=False) == []
    # the witness that the launch would import them: the same job after a zygote without it
    assert "triton.experimental.gluon" in _imported_by_first_launch(skip_launch_warmup=True)
