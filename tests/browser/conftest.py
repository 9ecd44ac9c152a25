"""Fixtures of the browser tier (the browser itself is the session's: tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.support.settings import SHORT_REPLY, start_app


@pytest.fixture(scope="session")
def short_app(engine, tmp_path_factory):
    """The chat with replies of exactly 24 tokens (ignore_eos): quick, with known figures."""
    settings, _ = engine
    yield from start_app(tmp_path_factory.mktemp("short"), engine_url=settings.engine_base_url,
                         ignore_eos=True, max_tokens=SHORT_REPLY)
