"""Sharing a saved chat on a real PostgreSQL chat database (the run's server)."""

from __future__ import annotations

import asyncio


from tests.support.share import owner_only_scenario


def test_sharing_works_the_same_on_postgresql(database):
    asyncio.run(owner_only_scenario(database))
