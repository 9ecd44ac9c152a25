"""The engine's stream given up after ERNIE_REQUEST_TIMEOUT_S with nothing read, on one timer.

The HTTP client's read timeout (aiohttp's ``sock_read``) does the same by moving a timer at
every network read: vLLM sends each token's event on its own, so a worker under a crowd
cancelled and re-armed thousands of timers a second, and the event loop then walked the
cancelled ones in its heap (7.5 % of a worker's CPU in a py-spy profile of 150 users at one
token per event, docs/performance.md). Here each reply has one timer, which fires once per
limit and, where bytes came meanwhile, re-arms itself for the rest.

Only a wait for the engine counts: while the reader is busy elsewhere (sending a frame to its
chat), the clock starts again, as aiohttp's pauses it while its reader is not reading.
"""

from __future__ import annotations

import asyncio
from typing import Optional


class IdleDeadline:
    """Cancels the current task if it waits ``limit_s`` for the engine with nothing read.

    Call :meth:`came` when bytes were read and :meth:`wait` before waiting again; after the
    task's ``CancelledError``, :meth:`expired_alone` tells whether the deadline caused it (and
    takes its cancellation back), else the error is someone else's (Stop) and goes on.
    """

    def __init__(self, limit_s: Optional[float]) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._limit = limit_s
        self.last = self._loop.time()
        self.waiting = True
        self.expired = False
        self._handle = self._loop.call_at(self.last + limit_s, self._check) if limit_s else None

    def came(self) -> None:
        self.last, self.waiting = self._loop.time(), False

    def wait(self) -> None:
        self.waiting = True

    def _check(self) -> None:
        now = self._loop.time()
        if not self.waiting:
            self.last = now  # its chat kept the reader: the engine gets a whole limit again
        if now < self.last + self._limit:
            self._handle = self._loop.call_at(self.last + self._limit, self._check)
            return
        self._handle, self.expired = None, True
        self._task.cancel()

    def expired_alone(self) -> bool:
        """The deadline cancelled the task and nothing else did: that cancellation is taken back."""
        return self.expired and self._task.uncancel() == 0

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
