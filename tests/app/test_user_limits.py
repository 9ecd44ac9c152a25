"""Per-user limits across workers: one user's messages sent at once to four workers, on SQLite
and on PostgreSQL."""

from __future__ import annotations

import asyncio
import time


from app.auth.user_limits import Limits, UserLimits


# --- the shared store -------------------------------------------------------------------

def test_workers_sending_at_once_count_one_user_once(new_store):
    """Messages of one user sent at once to four workers (four stores on one database): the
    counts are read and written atomically, so exactly the limit gets through."""
    limits, clock = Limits.from_settings(4, 0), lambda: 1000.0
    user = f"addr:10.0.{time.time_ns() % 250}.7"  # the PostgreSQL database outlives one test

    async def main():
        workers = [UserLimits(new_store(), limits, clock) for _ in range(4)]
        try:
            answers = await asyncio.gather(*(workers[i % 4].admit(user) for i in range(12)))
            return answers, await workers[0].admit(user + "8")
        finally:
            for worker in workers:
                await worker.store.close()
    answers, other = asyncio.run(main())
    assert sum(a is None for a in answers) == 4 and other is None
