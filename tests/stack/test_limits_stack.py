"""Per-user limits across two app workers behind HAProxy, on the session's CPU vLLM."""

from __future__ import annotations

import asyncio

import pytest

from server.loadtest.lib.chat_record import LIMITED
from server.loadtest.users.chats import AppChat
from tests.support.settings import start_balanced_app
from tests.support.limits import LIMIT, outcomes


@pytest.fixture(scope="module")
def balanced_limited_app(engine, tmp_path_factory):
    """Two app workers behind HAProxy, one store of counts (the SQLite file) for both."""
    settings, _ = engine
    yield from start_balanced_app(tmp_path_factory.mktemp("balanced-limited"), app_workers=2,
                                  engine_url=settings.engine_base_url, max_tokens=8,
                                  user_messages_per_min=LIMIT)


def test_the_limit_holds_across_workers(balanced_limited_app):
    """Chats of one address pinned to each worker in turn (the balancer's cookie): the limit
    counts them together, not per worker (which would let 2 x LIMIT through)."""
    url = balanced_limited_app.app_url

    async def go():
        chats = []
        for i in range(2 * LIMIT):
            chat = AppChat(url, i, f"[w {i}]", f"ERNIE_WORKER=w{i % 2}", "10.9.1.1")
            assert await chat.open() == ""
            await chat.ask("Hello.")
            await chat.close()
            chats.append(chat)
        return chats
    assert outcomes(asyncio.run(go())) == ["complete"] * LIMIT + [LIMITED] * LIMIT
