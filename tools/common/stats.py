"""Statistics of timing samples: one distribution's summary, and an A/B comparison.

Pure numpy/scipy on lists of nanoseconds; no I/O. Timings are skewed (a floor plus a
long tail from interrupts and other load), so every decision uses medians, and the
uncertainty of a median comes from order statistics or the bootstrap, never from a
normal approximation of the mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

# The worker stops sampling with this same estimator, so "stopped at 0.5%" and the
# reported standard error agree. It lives worker-side (numpy only) and is imported here.
from ...sandbox.worker.shared import median_rel_se

Verdict = Literal["faster", "slower", "inconclusive"]

CONFIDENCE = 0.95
MIN_BLOCKS = 20  # a paired bootstrap resamples at least this many blocks (compare())
# The minimal detectable effect is quoted at 80% power: an effect of that size is found
# (its 95% interval excludes 1) four times out of five at this noise level.
POWER = 0.80


@dataclass(frozen=True)
class Summary:
    n: int
    median_ns: float
    mean_ns: float
    p10_ns: float
    p90_ns: float
    iqr_ns: float
    cv: float  # standard deviation / mean
    median_rel_se: float  # standard error of the median / median (order-statistic formula)


def summarize(samples_ns: Sequence[float]) -> Summary:
    x = np.asarray(samples_ns, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples")
    p10, q1, median, q3, p90 = np.percentile(x, [10, 25, 50, 75, 90])
    mean = float(x.mean())
    cv = float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0
    return Summary(
        n=int(x.size),
        median_ns=float(median),
        mean_ns=mean,
        p10_ns=float(p10),
        p90_ns=float(p90),
        iqr_ns=float(q3 - q1),
        cv=cv,
        median_rel_se=median_rel_se(x),
    )


@dataclass(frozen=True)
class Comparison:
    ratio: float  # median(candidate) / median(baseline): < 1 means the candidate is faster
    ci_low: float
    ci_high: float
    verdict: Verdict
    min_detectable_effect_pct: float  # smallest change in % this noise level resolves
    num_pairs: int
    method: str


def compare(
    baseline_ns: Sequence[float],
    candidate_ns: Sequence[float],
    *,
    seed: int = 0,
    n_resamples: int = 2000,
    block_len: int | None = None,
) -> Comparison:
    """Ratio of medians with a paired bootstrap CI over interleaved samples.

    Sample i of each arm was taken back to back (ABAB...), so drift and bursts of
    outside load hit both arms of a pair; resampling pairs together keeps that
    correlation and the interval does not pay for drift twice. Outside load also comes
    in bursts longer than one pair, so pairs are resampled in contiguous blocks
    (`block_len`, default ~sqrt(n)): a burst stays inside one block instead of being
    counted as many independent observations. But never fewer than MIN_BLOCKS blocks: a
    bootstrap over a handful of blocks has a handful of distinct resamples, and its
    interval is far too narrow (A/A pairs of 5-8 calls, as the Triton interpreter's A/Bs
    on CPU often are, were called faster or slower half the time with sqrt(n) blocks;
    tests/tools/common/test_stats.py); below 2 x MIN_BLOCKS pairs, pairs are resampled
    one by one.
    """
    from scipy import stats  # ~1 s to import: only when a comparison is made, not at server start

    a = np.asarray(baseline_ns, dtype=np.float64)
    b = np.asarray(candidate_ns, dtype=np.float64)
    n = min(a.size, b.size)
    if n < 4:
        raise ValueError(f"need at least 4 interleaved pairs to compare, got {n}")
    a, b = a[:n], b[:n]
    ratio = float(np.median(b) / np.median(a))
    block = block_len or max(1, min(int(round(np.sqrt(n))), n // MIN_BLOCKS))
    # Blocks of `block` consecutive pairs; the bootstrap resamples whole blocks.
    num_blocks = n // block
    a_blocks = a[: num_blocks * block].reshape(num_blocks, block)
    b_blocks = b[: num_blocks * block].reshape(num_blocks, block)

    def log_ratio(block_ids, axis=-1):
        # block_ids: [..., num_blocks] resampled block indices -> [..., num_blocks * block] samples
        a_res = a_blocks[block_ids].reshape(block_ids.shape[:-1] + (-1,))
        b_res = b_blocks[block_ids].reshape(block_ids.shape[:-1] + (-1,))
        return np.log(np.median(b_res, axis=-1) / np.median(a_res, axis=-1))

    # Resampling block indices keeps each pair, and each block of pairs, together.
    res = stats.bootstrap(
        (np.arange(num_blocks),),
        log_ratio,
        vectorized=True,
        n_resamples=n_resamples,
        batch=max(1, 2_000_000 // n),
        method="percentile",
        confidence_level=CONFIDENCE,
        rng=np.random.default_rng(seed),
    )
    low, high = (
        float(np.exp(res.confidence_interval.low)),
        float(np.exp(res.confidence_interval.high)),
    )
    if high < 1.0:
        verdict: Verdict = "faster"
    elif low > 1.0:
        verdict = "slower"
    else:
        verdict = "inconclusive"
    z = stats.norm.ppf(0.5 + CONFIDENCE / 2) + stats.norm.ppf(POWER)
    mde = float(np.expm1(z * res.standard_error) * 100)
    return Comparison(
        ratio=ratio,
        ci_low=low,
        ci_high=high,
        verdict=verdict,
        min_detectable_effect_pct=mde,
        num_pairs=n,
        method=f"paired block bootstrap (block={block} pairs, {n_resamples} resamples, percentile)",
    )
