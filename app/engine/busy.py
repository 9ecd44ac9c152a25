"""An honest "busy": how many requests wait in the engine's queue, and about how long.

vLLM's /metrics give the queue (``vllm:num_requests_waiting``) and the requests finished
since start (the count of its end-to-end latency histogram).  Each app worker reads them
at most every ``MAX_AGE_S``, whatever the number of chats asking (``app.engine.single_flight``),
and keeps the finished count over the last ``WINDOW_S``: the recent throughput.  A message
that finds more than ``ERNIE_BUSY_QUEUE`` requests waiting is told how many are ahead and
about how long it will wait: those ahead, and itself, at the recent rate of finishing.
Before any throughput was seen, Little's law on vLLM's own figures stands in (as many
finish per second as run, over their mean time).

Pure functions for the figures; ``BusyGauge`` is the thin I/O around them.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable, Optional

from app.engine.single_flight import SingleFlight
from server.metrics import EngineMetrics

MAX_AGE_S = 0.5
WINDOW_S = 60.0
# A rate over less than this is mostly the luck of which replies ended in it.
MIN_SPAN_S = 2.0


@dataclass(frozen=True)
class Busy:
    """The engine's queue as a new message finds it: ``ahead`` waiting, about ``wait_s``
    seconds before it starts (None: no figure to go by yet)."""

    ahead: int
    wait_s: Optional[float]


def finish_rate(samples: deque) -> Optional[float]:
    """Requests finished per second over ``samples`` of (time, finished since start)."""
    if len(samples) < 2:
        return None
    (then, before), (now, after) = samples[0], samples[-1]
    if now - then < MIN_SPAN_S or after <= before:
        return None
    return (after - before) / (now - then)


def estimate_wait_s(ahead: int, rate: Optional[float], metrics: EngineMetrics) -> Optional[float]:
    """Seconds until a request behind ``ahead`` others starts."""
    if rate is None:
        seconds, finished = metrics.e2e
        if not finished or not seconds:
            return None
        rate = max(1, metrics.running) * finished / seconds  # Little's law: L = rate x time
    return (ahead + 1) / rate


def remember(samples: deque, now: float, finished: int) -> None:
    """Add a reading, dropping those older than the window (and all after a restart)."""
    if samples and finished < samples[-1][1]:
        samples.clear()
    samples.append((now, finished))
    while now - samples[0][0] > WINDOW_S:
        samples.popleft()


def busy_of(metrics: Optional[EngineMetrics], bound: int, samples: deque) -> Optional[Busy]:
    """The queue past ``bound``, or None: not longer, or no /metrics to tell."""
    if metrics is None or metrics.waiting <= bound:
        return None
    return Busy(metrics.waiting, estimate_wait_s(metrics.waiting, finish_rate(samples), metrics))


class BusyGauge:
    """One per app worker: the engine's queue, read at most every ``MAX_AGE_S``."""

    def __init__(self, bound: int, read: Callable[[], Awaitable[Optional[EngineMetrics]]],
                 clock: Callable[[], float] = time.monotonic):
        self.bound, self._read, self._clock = bound, read, clock
        self._metrics: SingleFlight[Optional[EngineMetrics]] = SingleFlight(MAX_AGE_S, clock)
        self._samples: deque = deque()

    async def _reading(self) -> Optional[EngineMetrics]:
        metrics = await self._read()
        if metrics is not None:
            remember(self._samples, self._clock(), metrics.e2e[1])
        return metrics

    async def busy(self) -> Optional[Busy]:
        """None also when the engine cannot be read: the reply's own path says what is wrong."""
        try:
            metrics = await self._metrics.get(self._reading)
        except Exception:
            return None
        return busy_of(metrics, self.bound, self._samples)
