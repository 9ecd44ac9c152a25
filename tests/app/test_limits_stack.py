"""Per-user limits and the busy answer on the real stack: the app (one worker, or two behind
HAProxy), the session's CPU vLLM, and chats through the app's websocket as qa-load's.

Without login a user is the client's address.  The chats here come from 127.0.0.1 and
name their address in X-Forwarded-For, which the app takes from the machine itself only
(uvicorn's forwarded_allow_ips; behind HAProxy, HAProxy's own forwardfor): the path a real
address takes, given one per simulated user.
"""

from __future__ import annotations

import asyncio
import contextlib
import re

import httpx
import pytest

from app.engine.busy import MAX_AGE_S
from server.loadtest.lib.chat_record import BUSY_REFUSED, LIMITED
from server.loadtest.users.chats import AppChat
from tests.support.metrics import metric_async
from tests.support.settings import start_app
from tests.support.limits import LIMIT, outcomes
RETRY = re.compile(r"Try again in (\d+) s")


@pytest.fixture(scope="module")
def limited_app(engine, tmp_path_factory):
    settings, _ = engine
    yield from start_app(tmp_path_factory.mktemp("limited"), engine_url=settings.engine_base_url,
                         max_tokens=8, user_messages_per_min=LIMIT)


async def ask_in_turn(url: str, address: str, n: int, cookie: str = "") -> list[AppChat]:
    """``n`` messages from ``address``, one after another, each in a new chat."""
    chats = []
    for i in range(n):
        chat = AppChat(url, i, f"[{address} {i}]", cookie, address)
        assert await chat.open() == ""
        await chat.ask(f"Say something, {i}.")
        await chat.close()
        chats.append(chat)
    return chats


def test_a_user_over_the_limit_is_told_when_to_retry_while_another_chats_on(limited_app):
    url = limited_app.app_url

    async def go():
        return await asyncio.gather(ask_in_turn(url, "10.9.0.1", LIMIT + 2),
                                    ask_in_turn(url, "10.9.0.2", LIMIT))
    heavy, other = asyncio.run(go())
    assert outcomes(heavy) == ["complete"] * LIMIT + [LIMITED] * 2
    assert outcomes(other) == ["complete"] * LIMIT, "another address is another user"
    said = heavy[-1].session.record.notice
    retry = RETRY.search(said)
    assert retry and 0 < int(retry.group(1)) <= 60, said
    assert f"{LIMIT} messages within a minute" in said


# --- busy -------------------------------------------------------------------------------

# More long replies at once than the CPU build runs together (its max_num_seqs, 128, for
# the API server): the rest wait in vLLM's queue.
LOAD_REPLIES, LOAD_TOKENS = 160, 200


@contextlib.asynccontextmanager
async def engine_loaded(settings):
    """Long replies (ignore_eos) streaming from the engine until the block ends."""
    async def reply(http: httpx.AsyncClient):
        body = {"model": settings.served_model_name, "stream": True, "ignore_eos": True,
                "max_tokens": LOAD_TOKENS, "messages": [{"role": "user", "content": "Go on."}]}
        async with http.stream("POST", f"{settings.engine_base_url}/v1/chat/completions", json=body) as r:
            async for _ in r.aiter_bytes():
                pass
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=None)) as http:
        load = [asyncio.create_task(reply(http)) for _ in range(LOAD_REPLIES)]
        try:
            for _ in range(600):
                if await metric_async(settings.engine_base_url, "vllm:num_requests_waiting") > 1:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the load never made the engine queue requests")
            # The app's gauge reads the queue at most every MAX_AGE_S: a reading of the short
            # queue taken by the message just before may still be fresh for that long.
            await asyncio.sleep(MAX_AGE_S + 0.1)
            assert await metric_async(settings.engine_base_url, "vllm:num_requests_waiting") > 1, \
                "the load no longer keeps requests waiting"
            yield
        finally:
            for task in load:
                task.cancel()
            await asyncio.gather(*load, return_exceptions=True)


@pytest.fixture(scope="module", params=["refuse", "wait"])
def busy_app(engine, tmp_path_factory, request):
    settings, _ = engine
    yield from start_app(tmp_path_factory.mktemp(f"busy-{request.param}"),
                         engine_url=settings.engine_base_url, max_tokens=8, busy_queue=1,
                         busy_action=request.param)


def test_a_message_meets_a_full_queue_with_how_many_are_ahead(engine, busy_app):
    engine_settings_, _ = engine

    async def go():
        quiet = AppChat(busy_app.app_url, 0, "[quiet]")
        assert await quiet.open() == ""
        await quiet.ask("Hello.")  # the queue is short: no notice
        chat = AppChat(busy_app.app_url, 1, "[busy]")
        assert await chat.open() == ""
        async with engine_loaded(engine_settings_):
            asking = asyncio.create_task(chat.ask("Hello again."))
            if busy_app.busy_action == "wait":  # its reply comes once the load has gone
                while not chat.session.record.busy_waited and not asking.done():
                    await asyncio.sleep(0.05)
            else:
                await asking
        await asking
        await quiet.close()
        await chat.close()
        return quiet.session.record, chat.session.record
    quiet, busy = asyncio.run(go())
    assert quiet.outcome == "complete" and not quiet.notice
    ahead = re.search(r"Busy: (\d+) ahead of you, about (\d+ s|\d+ min)", busy.notice)
    assert ahead and int(ahead.group(1)) > 1, busy.notice
    if busy_app.busy_action == "refuse":
        assert busy.outcome == BUSY_REFUSED and "try again" in busy.notice
    else:
        assert busy.outcome == "busy_waited" and busy.replied
