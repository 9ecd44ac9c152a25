"""When requests arrive in an open-loop load: ``bench --request-rate`` and ``qa-load
--arrival-rate`` (pure, standard library only).

The schedule is ``vllm bench serve``'s (``vllm/benchmarks/serve.py``, ``get_request``, vLLM
0.11-0.32): the gaps between arrivals are drawn from a gamma distribution of shape
``burstiness`` and scale ``1 / (rate x burstiness)``, so their mean is ``1 / rate`` whatever
the burstiness; burstiness 1 is a Poisson process, below 1 burstier, above 1 more even, and
infinite burstiness gives constant gaps of ``1 / rate``. The cumulative delays are then
rescaled so that the last of ``n`` arrivals lands at exactly ``n / rate`` (vLLM does this so
that the throughput of runs with different seeds compares). An infinite rate sends everything
at once. Drawn with ``random.gammavariate`` from the load's seed, not numpy's: the same seed
gives the same schedule here, not the same one as vLLM's.
"""

from __future__ import annotations

import math
import random
from typing import Optional

INF = math.inf


def check_rate(rate: float, burstiness: float, flag: str = "--request-rate") -> None:
    """Raise ValueError for a rate or burstiness vLLM would refuse."""
    if math.isnan(rate) or rate <= 0:
        raise ValueError(f"{flag} must be a positive number of requests per second (or inf).")
    if math.isnan(burstiness) or burstiness <= 0:
        raise ValueError("--burstiness must be positive (1: Poisson; below 1 burstier; inf: even).")


def arrival_times(n: int, rate: float, burstiness: float = 1.0,
                  rng: Optional[random.Random] = None) -> list[float]:
    """The arrival time in seconds (from the start of the load) of each of ``n`` requests."""
    check_rate(rate, burstiness)
    if n <= 0:
        return []
    if rate == INF:
        return [0.0] * n
    if burstiness == INF:
        gaps = [1.0 / rate] * n
    else:
        rng = rng or random.Random(0)
        theta = 1.0 / (rate * burstiness)
        gaps = [rng.gammavariate(burstiness, theta) for _ in range(n)]
    times, total = [], 0.0
    for gap in gaps:
        total += gap
        times.append(total)
    if times[-1] > 0:
        factor = (n / rate) / times[-1]
        times = [t * factor for t in times]
    return times


def mean_gap(times: list[float]) -> Optional[float]:
    """The mean time between consecutive arrivals; None for fewer than two."""
    ordered = sorted(times)
    return (ordered[-1] - ordered[0]) / (len(ordered) - 1) if len(ordered) > 1 else None


def achieved_rate(times: list[float]) -> Optional[float]:
    """Arrivals per second as vLLM's schedule counts them: ``n`` over the last arrival (the
    asked rate exactly when every request arrived on time); None without a positive time."""
    last = max(times, default=0.0)
    return len(times) / last if last > 0 else None
