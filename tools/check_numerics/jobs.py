"""check_numerics, step 2: the sandbox jobs (one reference job, one candidate job per case).

Nothing here judges: it runs jobs, checks they finished, and keeps the files they wrote.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ...sandbox.job import Job, JobResult
from ..base import AgentError, Sandbox
from .plan import Case, Plan


async def run_reference(sandbox: Sandbox, plan: Plan, env: dict, timeout_s: float) -> JobResult:
    """Seeded inputs and float64 reference outputs for every trial of every case."""
    ref = await sandbox.run(Job(op="reference", payload=_reference_payload(plan), timeout_s=timeout_s, env=env))
    if not ref.ok:
        raise AgentError(f"the reference could not run ({ref.status}): {ref.error}. Fix the reference or the shapes.")
    return ref


def keep_reference_files(out_dir: Path | None, plan: Plan, keep: Path) -> Path:
    for case in plan.cases:
        for key in case.keys:
            for name in (f"{key}.inputs.pt", f"{key}.ref.pt"):
                src = Path(out_dir or "/nonexistent") / name
                if not src.is_file() or src.is_symlink():
                    raise AgentError(f"the reference job wrote no {name}; the reference must return tensors")
                shutil.copyfile(src, keep / name)
    return keep


def _reference_payload(plan: Plan) -> dict:
    items = [{"key": key, "shape": c.shape, "dtype": c.storage_dtype, "seed": seed, "distribution": plan.distribution}
             for c in plan.cases for key, seed in zip(c.keys, c.seeds)]
    return {"reference": plan.reference, "args": plan.args, "make_inputs": plan.make_inputs, "items": items,
            "float64": True}


async def run_case(plan: Plan, case: Case, sandbox: Sandbox, env: dict, ref_dir: Path, enabled: set[str],
                   timeout_s: float) -> JobResult:
    """The candidate on one case's inputs (every trial), in one fresh worker."""
    payload = {"candidate": plan.candidate, "keys": case.keys, "repeat": "determinism" in enabled,
               "partition": plan.partition}
    inputs = {f"{k}.inputs.pt": ref_dir / f"{k}.inputs.pt" for k in case.keys}
    res = await sandbox.run(Job(op="numerics_run", payload=payload, timeout_s=timeout_s, inputs=inputs, env=env))
    if res.status == "timeout":
        raise AgentError(f"the candidate timed out after {timeout_s:g} s on case {case.label}; use smaller shapes, "
                         "fewer trials, or raise timeout_s (the Triton interpreter is slow on CPU)")
    if not res.ok:
        raise AgentError(f"the candidate could not run on case {case.label} ({res.status}): {res.error}")
    return res
