"""check_numerics, step 2: the sandbox jobs (one reference job, one candidate job per case).

Nothing here judges: it runs jobs, checks they finished, parses what they answered (answers.py)
and keeps the files they wrote.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ...sandbox.job import Job
from ...sandbox.worker.protocol import (
    OP_NUMERICS_RUN,
    OP_REFERENCE,
    NumericsRunPayload,
    ReferencePayload,
    inputs_file,
    reference_file,
)
from ..base import AgentError, Sandbox
from .answers import CandidateRun, RefFacts, candidate_run, reference_facts
from .plan import Case, Plan


@dataclass(frozen=True)
class ReferenceRun:
    facts: dict[str, RefFacts]  # by trial key
    out_dir: Path | None  # its inputs and float64 outputs, until keep_reference_files copies them
    compiles: int  # Triton cache entries compiled: the sandbox's count


async def run_reference(sandbox: Sandbox, plan: Plan, timeout_s: float) -> ReferenceRun:
    """Seeded inputs and float64 reference outputs for every trial of every case."""
    ref = await sandbox.run(
        Job(op=OP_REFERENCE, payload=_reference_payload(plan), timeout_s=timeout_s)
    )
    if not ref.ok:
        raise AgentError(
            f"the reference could not run ({ref.status}): {ref.error}. Fix the reference or the shapes."
        )
    return ReferenceRun(
        facts=reference_facts(ref.result), out_dir=ref.out_dir, compiles=ref.num_compiles
    )


def keep_reference_files(out_dir: Path | None, plan: Plan, keep: Path) -> Path:
    for case in plan.cases:
        for key in case.keys:
            for name in (inputs_file(key), reference_file(key)):
                src = Path(out_dir or "/nonexistent") / name
                if not src.is_file() or src.is_symlink():
                    raise AgentError(
                        f"the reference job wrote no {name}; the reference must return tensors"
                    )
                shutil.copyfile(src, keep / name)
    return keep


def _reference_payload(plan: Plan) -> ReferencePayload:
    items = [
        {
            "key": key,
            "shape": c.shape,
            "dtype": c.storage_dtype,
            "seed": seed,
            "distribution": plan.distribution,
            "layout": c.layout,
            "layout_args": c.layout_args,
        }
        for c in plan.cases
        for key, seed in zip(c.keys, c.seeds)
    ]
    return {
        "reference": plan.reference,
        "args": plan.args,
        "make_inputs": plan.make_inputs,
        "items": items,
        "float64": True,
    }


async def run_case(
    plan: Plan,
    case: Case,
    sandbox: Sandbox,
    ref_dir: Path,
    enabled: set[str],
    timeout_s: float,
    cache_group: str,
) -> CandidateRun:
    """The candidate on one case's inputs (every trial), in one fresh worker."""
    payload: NumericsRunPayload = {
        "candidate": plan.candidate,
        "keys": case.keys,
        "repeat": "determinism" in enabled,
        "partition": plan.partition,
        "launch_config": plan.launch_config,
    }
    inputs = {inputs_file(k): ref_dir / inputs_file(k) for k in case.keys}
    res = await sandbox.run(
        Job(
            op=OP_NUMERICS_RUN,
            payload=payload,
            timeout_s=timeout_s,
            inputs=inputs,
            triton_cache=cache_group,
        )
    )
    if res.status == "timeout":
        raise AgentError(
            f"the candidate timed out after {timeout_s:g} s on case {case.label}; use smaller shapes, "
            "fewer trials, or raise timeout_s (the Triton interpreter is slow on CPU)"
        )
    if not res.ok:
        raise AgentError(
            f"the candidate could not run on case {case.label} ({res.status}): {res.error}"
        )
    return candidate_run(res.result, res.out_dir, res.num_compiles)
