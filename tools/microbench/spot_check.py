"""microbench's spot-check verdict: the saved outputs of randomly chosen timed calls vs the
reference recomputed in its own job from the same input seeds. A failed or missing
check voids the timing. Runs in a judge thread; imports torch at the top and is
imported only there, never on the server's import path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from ...sandbox.worker.protocol import input_set_key, reference_file
from ...sandbox.worker.tensors import load_tensors
from ..common.error_metrics import rel_l2
from ..common.tolerance import ResolvedTolerance
from .jobs import SpotCall
from .measure import SpotCheck
from .plan import Code


def judge_spot_checks(
    arms: Sequence[Code],
    wanted: list[SpotCall],
    sets: list[int],
    out_dir: Path | None,
    ref_dir: Path | None,
    tol: ResolvedTolerance,
) -> dict[str, SpotCheck]:
    """The spot-check of every arm, by arm name."""
    checks = {a.name: SpotCheck("skipped", "the reference itself") for a in arms}
    for a in arms:
        if a.is_reference:
            continue
        if not wanted or out_dir is None or ref_dir is None:
            checks[a.name] = SpotCheck("failed", "no timed outputs were saved")
            continue
        calls = [c for c in wanted if c.arm == a.name]
        checks[a.name] = _check_arm(a, calls, sets, out_dir, ref_dir, tol)
    return checks


def _check_arm(
    arm: Code,
    calls: list[SpotCall],
    sets: list[int],
    out_dir: Path,
    ref_dir: Path,
    tol: ResolvedTolerance,
) -> SpotCheck:
    worst, failures, checked = None, [], []
    for c in calls:
        checked.append(str(c.iteration))
        try:
            outs, refs = _load_pair(c, sets, out_dir, ref_dir)
        except Exception as exc:  # missing or unreadable evidence is a failure, not a pass
            failures.append(f"call {c.iteration}: outputs unreadable ({exc})")
            continue
        if len(outs) != len(refs) or any(o.shape != r.shape for o, r in zip(outs, refs)):
            failures.append(
                f"call {c.iteration}: output shapes {[list(o.shape) for o in outs]} "
                f"!= reference {[list(r.shape) for r in refs]}"
            )
            continue
        for j, (o, r) in enumerate(zip(outs, refs)):
            # rel L2 (inf on NaN/Inf where the reference is finite): the full error
            # report is check_numerics' job, and costs seconds on large outputs
            err = rel_l2(o, r)
            worst = max(worst or 0.0, err)
            if not _within(o, r, err, tol):
                failures.append(
                    f"call {c.iteration} output {j}: rel L2 {err:.3g} "
                    f"(tolerance {tol.rel_l2:g}, {tol.source})"
                )
    detail = f"timed calls {', '.join(checked)} checked; worst rel L2 {worst if worst is not None else 'n/a'}"
    if failures or not checked:
        return SpotCheck("failed", "; ".join(failures[:3]) + f" ({detail})")
    return SpotCheck("passed", detail)


def _load_pair(call: SpotCall, sets: list[int], out_dir: Path, ref_dir: Path) -> tuple[list, list]:
    name, s = call.file, call.input_set
    if "/" in name or ".." in name or s not in sets:
        raise ValueError(f"bad file name {name!r}")
    return _ordered(load_tensors(out_dir / name)), _ordered(
        load_tensors(ref_dir / reference_file(input_set_key(s)))
    )


def _within(out: torch.Tensor, ref: torch.Tensor, err: float, tol: ResolvedTolerance) -> bool:
    if not err <= tol.rel_l2:  # NaN fails too
        return False
    if tol.max_abs is None:
        return True
    return float((out.double() - ref.double()).abs().max()) <= tol.max_abs


def _ordered(tensors: dict) -> list:
    return [tensors[k] for k in sorted(tensors, key=lambda k: int(k) if k.isdigit() else 1 << 30)]
