"""One answer for many asking tasks: the first asks, the others wait for the same answer.

A crowd opens many chats at once, and each would ask the engine the same thing (what it
is, how its chat template counts) in the same millisecond: a hundred round trips to
vLLM's busy API server for one answer (docs/performance.md, "The app's cost per chat").
``SingleFlight`` runs the question once; everyone who asks meanwhile, or within
``max_age_s`` after, gets that answer.  A failed question is not kept: the next asker
asks again, so a transient error does not stick.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Generic, Optional, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """A shared answer, asked at most once at a time; ``max_age_s`` None keeps it for good."""

    def __init__(self, max_age_s: Optional[float] = None, clock: Callable[[], float] = time.monotonic):
        self._max_age_s, self._clock = max_age_s, clock
        self._task: Optional[asyncio.Future] = None
        self._started = 0.0

    def _usable(self) -> bool:
        task = self._task
        if task is None:
            return False
        if not task.done():
            return True
        fresh = self._max_age_s is None or self._clock() - self._started <= self._max_age_s
        return not task.cancelled() and task.exception() is None and fresh

    async def get(self, ask: Callable[[], Awaitable[T]]) -> T:
        if not self._usable():
            self._task, self._started = asyncio.ensure_future(ask()), self._clock()
        # A chat stopped while it waits must not cancel the question the others wait for.
        return await asyncio.shield(self._task)

    def forget(self) -> None:
        self._task = None
