"""Fixtures of the app tier: apps on the session's engine, login stores on PostgreSQL."""

from __future__ import annotations

import pytest

from server.auth_store import PostgresStore, SqliteStore
from tests.support.settings import QA_MAX_TOKENS, start_app


@pytest.fixture(scope="session")
def short_replies_app(engine, tmp_path_factory):
    """The chat on the session engine, every reply QA_MAX_TOKENS long (ignore_eos)."""
    settings, _ = engine
    tmp = tmp_path_factory.mktemp("qa")
    yield from start_app(tmp, engine_url=settings.engine_base_url, ignore_eos=True,
                         max_tokens=QA_MAX_TOKENS, usage_log=tmp / "usage.jsonl")


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request, tmp_path):
    """Makes login stores (each a worker's connections) on one SQLite file or one PostgreSQL
    database."""
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "auth.db")
    url = request.getfixturevalue("database")
    return lambda: PostgresStore(url)
