"""The threads that read attached files: a few of their own, refusing a message when full.

One read can hold its thread for as long as the PDF time limit (a PDF built to be slow to
parse: app/conversation/pdf_reader.py).  On asyncio's default executor such reads took the
threads that other users' logins, every request's session check and the limits' admission
were waiting for: eight messages naming a slow PDF held another user's GET /user for 52 s.
Here files are read on ``AT_ONCE`` threads of their own, which also bounds the PDF child
processes of a worker (each may take ERNIE_PDF_MEMORY_MB); ``WAITING`` more messages may wait
for them, and one past that is refused at once (:class:`Busy`), nothing of it read or lost,
instead of queueing without bound.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")

AT_ONCE = 2
# Each waits for at most one read before its own: a few seconds, or one PDF time limit.
WAITING = 2


class Busy(Exception):
    """Every reader is taken and as many messages wait: nothing of this one was read."""


class Readers:
    def __init__(self, at_once: int = AT_ONCE, waiting: int = WAITING):
        self.pool = ThreadPoolExecutor(at_once, thread_name_prefix="file-reader")
        self.room = at_once + waiting
        self.taken = 0
        self.lock = threading.Lock()  # given back from the pool's threads

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` on a reader thread; raises :class:`Busy` at once when there is no room."""
        with self.lock:
            if self.taken >= self.room:
                raise Busy
            self.taken += 1
        future = self.pool.submit(work)
        # Room comes back when the work ends, not when its message is stopped: a stopped
        # message's read holds its thread (and its PDF child) until then.
        future.add_done_callback(self._give_back)
        return await asyncio.wrap_future(future)

    def _give_back(self, _: Future) -> None:
        with self.lock:
            self.taken -= 1
