"""When each request is sent: an open loop (Poisson/gamma arrivals at a rate) or a
closed loop (a fixed number in flight).

Open loop: gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)), so the mean gap
is 1/rate and its coefficient of variation 1/sqrt(burstiness); burstiness 1 is Poisson.
Send times are absolute offsets from the start (cumulative gaps), so a slow client
falls behind visibly instead of drifting the rate (vllm#21104). A request's timer
starts at its scheduled time even when a concurrency cap makes it wait: client-side
queueing shows up in TTFT and in `client_wait_ms` instead of being hidden (vllm#54101).

Closed loop (no rate, a cap): a request is scheduled when a slot frees; there is no
hidden wait to count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Arrivals:
    rate: float = (
        math.inf
    )  # requests per second; inf = send all at once (bounded by max_concurrency)
    burstiness: float = 1.0  # gamma shape; 1 = Poisson, < 1 burstier, > 1 more regular
    max_concurrency: int | None = None  # requests in flight at most (None = no cap)
    seed: int = 0

    def __post_init__(self):
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0 requests/s (or inf), got {self.rate}")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise ValueError(f"burstiness must be a finite number > 0, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")

    @property
    def is_closed_loop(self) -> bool:
        return math.isinf(self.rate) and self.max_concurrency is not None

    def offsets_s(self, n: int) -> list[float]:
        """Scheduled send times of n requests, seconds after the start (open loop)."""
        if math.isinf(self.rate):
            return [0.0] * n
        rng = np.random.default_rng(self.seed)
        gaps = rng.gamma(shape=self.burstiness, scale=1.0 / (self.rate * self.burstiness), size=n)
        gaps[0] = 0.0  # the first request goes at the start
        return np.cumsum(gaps).tolist()
