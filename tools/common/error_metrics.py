"""Error metrics between a candidate's output and the reference: rel L2, ULP, mismatches.

Pure torch on tensors the parent loaded; no candidate code runs. Imported only inside
judge threads (never on the server's import path), so torch is imported once, here.
"""

from __future__ import annotations

import numpy as np
import torch

# (mantissa bits, smallest normal exponent) for ULP sizes in the output dtype.
_FORMATS = {
    "float64": (52, -1022),
    "float32": (23, -126),
    "tf32": (10, -126),
    "float16": (10, -14),
    "bfloat16": (7, -126),
}
_INTEGER_DTYPES = {"int8", "uint8", "int16", "int32", "int64", "bool"}  # spacing 1
# An error of more ULPs than float64 can count (a value where the reference is an exact 0 of a
# float64 output: its ULP is the 5e-324 subnormal step) saturates here instead of becoming inf,
# which would turn the percentiles into NaN.
ULP_CEILING = torch.finfo(torch.float64).max
NUM_FIRST_MISMATCHES = 5
# The error numbers of an output; each is inf where the candidate and the reference disagree on
# which elements are finite (the agent-facing models carry it as null: JSON has no inf).
ERROR_FIELDS = ("max_abs_error", "max_rel_error", "rel_l2_error", "ulp_p50", "ulp_p99", "ulp_max")


def compare(candidate, reference, out_dtype: str, rel_l2_tol: float) -> dict:
    """All the error numbers for one output of one trial (plain floats and lists). The
    ERROR_FIELDS are inf when any element is NaN/Inf in one and finite in the other."""
    c, r = candidate.double(), reference.double()
    c_finite, r_finite = torch.isfinite(c), torch.isfinite(r)
    both = c_finite & r_finite
    # The common case (files the jobs saved are contiguous, all finite) in about half the tensor
    # ops: a warm one-case check compares ~16 times. Contiguous, so every tensor below has the
    # same memory order as the general path's, and the norms the same bits.
    if c.is_contiguous() and r.is_contiguous() and bool(both.all()):
        nonfinite = None
        diff, r_abs = (c - r).abs(), r.abs()
        r_fin = r.reshape(-1)  # the same elements in the same order as r[both]
    else:
        # NaN/Inf where the reference is finite (or finite where it is not): never tolerated
        nonfinite = (c_finite != r_finite) | (~c_finite & ~r_finite & ~_same_nonfinite(c, r))
        diff = torch.where(both, (c - r).abs(), torch.zeros_like(c))
        r_abs = torch.where(r_finite, r.abs(), torch.zeros_like(r))
        r_fin = r[both]
    rms = float(r_fin.pow(2).mean().sqrt()) if r_fin.numel() else 0.0
    ref_norm = float(r_fin.norm()) if r_fin.numel() else 0.0
    diff_norm = float(diff.norm())
    score = diff / (r_abs + rms + 1e-300)  # error relative to the element's own scale
    mismatch = diff > rel_l2_tol * (r_abs + rms)
    if nonfinite is not None:
        mismatch |= nonfinite
    ulp = (diff / ulp_size(r_abs, out_dtype)).clamp_max(ULP_CEILING)
    ulp_both = ulp.reshape(-1) if nonfinite is None else ulp[both]
    worst_flat = _worst_index(nonfinite, score)
    mismatch_idx = mismatch.reshape(-1).nonzero()[:NUM_FIRST_MISMATCHES, 0].tolist()
    ulp_p50, ulp_p99 = _quantiles(ulp_both, (0.5, 0.99))
    errors = {
        "max_abs_error": float(diff.max()) if c.numel() else 0.0,
        "max_rel_error": _max_rel_error(diff, r_abs, both),
        "rel_l2_error": _ratio_of_norms(diff_norm, ref_norm),
        "ulp_p50": ulp_p50,
        "ulp_p99": ulp_p99,
        "ulp_max": float(ulp_both.max()) if ulp_both.numel() else 0.0,
    }
    num_nonfinite = 0 if nonfinite is None else int(nonfinite.sum())
    if num_nonfinite:
        # NaN/Inf where the reference is finite (an unwritten element, overflow) or the reverse:
        # the error there is unbounded, so the error over the whole output is too, never the
        # error of the finite elements alone (an output left fully unwritten would score 0)
        errors = dict.fromkeys(ERROR_FIELDS, float("inf"))
    return {
        **errors,
        "num_mismatches": int(mismatch.sum()),
        "first_mismatch_indices": [unravel(i, c.shape) for i in mismatch_idx],
        "nonfinite_mismatches": num_nonfinite,
        "candidate_nan_count": 0 if nonfinite is None else int(torch.isnan(c).sum()),
        "candidate_inf_count": 0 if nonfinite is None else int(torch.isinf(c).sum()),
        "reference_nonfinite_count": 0 if nonfinite is None else int((~r_finite).sum()),
        "worst_index": unravel(worst_flat, c.shape),
        "worst_candidate": _num(c.reshape(-1)[worst_flat]) if c.numel() else None,
        "worst_reference": _num(r.reshape(-1)[worst_flat]) if c.numel() else None,
    }


def _worst_index(nonfinite, score) -> int:
    """Flat index of the worst element: the first non-finite mismatch, else the largest scaled error."""
    if nonfinite is not None and bool(nonfinite.any()):
        return int(nonfinite.reshape(-1).nonzero()[0, 0])
    if score.numel():
        return int(score.reshape(-1).argmax())
    return 0


def _max_rel_error(diff, r_abs, both) -> float:
    nonzero = both & (r_abs > 0)
    if not bool(nonzero.any()):
        return 0.0
    return float((diff / r_abs.clamp_min(1e-300))[nonzero].max())


def _ratio_of_norms(num: float, den: float) -> float:
    """num / den; 0 when both are 0, inf when only the denominator is."""
    if den > 0:
        return num / den
    return 0.0 if num == 0 else float("inf")


def rel_l2(a, b) -> float:
    """||a - b|| / ||b|| over elements finite in both (inf when a has NaN where b has not)."""
    a, b = a.double(), b.double()
    if bool((torch.isfinite(a) != torch.isfinite(b)).any()):
        return float("inf")
    both = torch.isfinite(a) & torch.isfinite(b)
    num, den = float((a - b)[both].norm()), float(b[both].norm())
    return _ratio_of_norms(num, den)


def ulp_size(magnitude, dtype: str):
    """Spacing of representable numbers of `dtype` at each |value| (float64 tensor)."""
    if dtype in _INTEGER_DTYPES:
        return torch.ones_like(magnitude)
    mant, emin = _FORMATS.get(dtype, _FORMATS["float64"])
    _, exp = torch.frexp(magnitude)  # |v| = m * 2^exp, m in [0.5, 1); frexp(0) gives exp 0
    floor_log2 = torch.where(
        magnitude > 0, exp.to(torch.float64) - 1, torch.full_like(magnitude, emin)
    )
    return torch.pow(2.0, floor_log2.clamp_min(emin) - mant)  # below 2^emin: the subnormal step


def round_to(x, dtype: str):
    """x (float tensor) rounded to `dtype` and back to float64; tf32 rounds to 10 mantissa bits."""
    if dtype == "tf32":
        bits = x.float().view(torch.int32)
        rounded = (bits + 0x1000) & ~0x1FFF  # round half up at bit 13, keep 10 mantissa bits
        return rounded.view(torch.float32).double()
    return x.to(getattr(torch, dtype)).double()


def representable_fraction(x, dtype: str) -> float:
    """Share of finite nonzero elements that are exact in `dtype` (≈ 2^-13 for honest fp32
    results vs fp16; near 1 when the kernel really computed in the lower format)."""
    x = x.double()
    keep = torch.isfinite(x) & (x != 0)
    if not bool(keep.any()):
        return 0.0
    v = x[keep]
    return float((round_to(v, dtype) == v).double().mean())


def unravel(flat: int, shape) -> list[int]:
    idx = []
    for size in reversed(tuple(shape)):
        idx.append(flat % size if size else 0)
        flat //= size if size else 1
    return idx[::-1]


def _same_nonfinite(c, r):
    return (torch.isnan(c) & torch.isnan(r)) | (
        torch.isinf(c) & torch.isinf(r) & (c.sign() == r.sign())
    )


def _quantiles(x, qs: tuple[float, ...]) -> list[float]:
    return [float(v) for v in np.quantile(x.cpu().numpy(), qs)] if x.numel() else [0.0] * len(qs)


def _num(v) -> float | None:
    v = float(v)
    return v if v == v and abs(v) != float("inf") else None
