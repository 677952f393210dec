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
    # median over pairs of candidate_i / baseline_i (pair i timed back to back): < 1 means the
    # candidate is faster. The interval is of this same statistic, so it holds the ratio.
    ratio: float
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
    """The median of the paired ratios candidate_i / baseline_i, with a paired block bootstrap
    CI of that same median.

    Sample i of each arm was taken back to back (ABAB...), so drift and bursts of outside load
    hit both arms of a pair: the pair's ratio cancels them, and the median of the ratios is the
    typical effect. Outside load also comes in bursts longer than one pair, so pairs are
    resampled in contiguous blocks (`block_len`, default ~sqrt(n)), circularly (a block may
    wrap from the last pair to the first, so every pair is equally likely to be drawn and
    every pair counts): a burst stays inside one block instead of being counted as many
    independent observations. But never fewer than MIN_BLOCKS blocks: a bootstrap over a
    handful of blocks has a handful of distinct resamples, and its interval is far too narrow
    (A/A pairs of 5-8 calls, as the Triton interpreter's A/Bs on CPU often are, were called
    faster or slower half the time with sqrt(n) blocks; tests/tools/common/test_stats.py);
    below 2 x MIN_BLOCKS pairs, pairs are resampled one by one.

    The point estimate and the interval are the same statistic on the same pairs, so the
    interval holds the estimate (issue 34: a ratio of medians beside a bootstrap of another
    statistic lay outside its own interval).
    """
    from scipy import stats  # ~1 s to import: only when a comparison is made, not at server start

    a = np.asarray(baseline_ns, dtype=np.float64)
    b = np.asarray(candidate_ns, dtype=np.float64)
    n = min(a.size, b.size)
    if n < 4:
        raise ValueError(f"need at least 4 interleaved pairs to compare, got {n}")
    ratios = b[:n] / a[:n]
    block = block_len or max(1, min(int(round(np.sqrt(n))), n // MIN_BLOCKS))
    boot = _circular_block_medians(ratios, block, n_resamples, np.random.default_rng(seed))
    if n < 2 * MIN_BLOCKS:
        # pairs one by one: the exact order-statistic (sign test) interval of a median, which a
        # percentile bootstrap of a handful of pairs undercovers (14 of 100 A/A pairs of 8 calls)
        rank = _sign_test_rank(n)
        ordered = np.sort(ratios)
        low, high = float(ordered[rank]), float(ordered[n - 1 - rank])
        how = f"exact sign-test interval of the median ({n} pairs)"
    else:
        qs = np.quantile(boot, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
        low, high = float(qs[0]), float(qs[1])
        how = f"circular block bootstrap (block={block} pairs, {n_resamples} resamples, percentile)"
    if high < 1.0:
        verdict: Verdict = "faster"
    elif low > 1.0:
        verdict = "slower"
    else:
        verdict = "inconclusive"
    z = stats.norm.ppf(0.5 + CONFIDENCE / 2) + stats.norm.ppf(POWER)
    mde = float(np.expm1(z * np.log(boot).std(ddof=1)) * 100)
    return Comparison(
        ratio=float(np.median(ratios)),
        ci_low=low,
        ci_high=high,
        verdict=verdict,
        min_detectable_effect_pct=mde,
        num_pairs=n,
        method=f"median of paired ratios, {how}",
    )


def _sign_test_rank(n: int) -> int:
    """0-based rank r of the order statistics x_(r), x_(n-1-r) that bound a median with at least
    CONFIDENCE (Binomial(n, 1/2) tails); r = 0 (the extremes) when n is too small for that."""
    from scipy import stats

    tail = (1 - CONFIDENCE) / 2
    rank = 0
    while rank + 1 < n / 2 and stats.binom.cdf(rank + 1, n, 0.5) <= tail:
        rank += 1
    return rank


def _circular_block_medians(
    x: np.ndarray, block: int, n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Medians of `n_resamples` circular block resamples of x, each of x's length: blocks of
    `block` consecutive elements start anywhere (wrapping past the end), in batches that keep
    memory near 2M elements."""
    n = x.size
    num_blocks = -(-n // block)
    offsets = np.arange(block)
    batch = max(1, 2_000_000 // (num_blocks * block))
    medians = []
    for done in range(0, n_resamples, batch):
        rows = min(batch, n_resamples - done)
        starts = rng.integers(0, n, size=(rows, num_blocks, 1))
        idx = ((starts + offsets) % n).reshape(rows, -1)[:, :n]
        medians.append(np.median(x[idx], axis=-1))
    return np.concatenate(medians)
