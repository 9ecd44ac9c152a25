"""Per-user limits and the busy answer on the real app, the session's CPU vLLM and chats
through the app's websocket (as qa-load's, or raw), each limit's attack performed: messages over
the minute's limit, commands, ten messages at once under a small day of tokens, more replies
at once than a user may run; and what each refused one left in the saved chats.

The limits' app has login and saved chats (SQLite): a user is the login name (the client's
address stands for a user without login: tests/stack/test_limits_stack.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
from collections import Counter
from pathlib import Path

import httpx
import pytest

from app.engine.busy import MAX_AGE_S
from app.kept.admitted_steps import NAME_CHARS
from server.loadtest.lib.chat_record import BUSY_REFUSED, LIMITED, SessionRecord
from server.loadtest.users.chats import AppChat
from tests.support.chat import until
from tests.support.limits import LIMIT, SavedChats, WatchedChat, login_cookie, outcomes
from tests.support.metrics import metric_async
from tests.support.settings import start_app
RETRY = re.compile(r"Try again in (\d+) s")
# A day's tokens: a few short exchanges fit, two reservations of a long message do not.
DAY_TOKENS = 3000
REPLIES_AT_ONCE = 2
USERS = {name: f"{name}-secret" for name in ("heavy", "other", "mallory", "commander", "burst", "juggler")}


@pytest.fixture(scope="module")
def limited_app(engine, tmp_path_factory):
    settings, _ = engine
    tmp = tmp_path_factory.mktemp("limited")
    yield from start_app(tmp, engine_url=settings.engine_base_url, max_tokens=8, ignore_eos=True,
                         user_messages_per_min=LIMIT, user_tokens_per_day=DAY_TOKENS,
                         replies_per_user=REPLIES_AT_ONCE, chat_db=tmp / "chats.db",
                         users=",".join(f"{name}:{password}" for name, password in USERS.items()))


def cookie_of(app, user: str) -> str:
    return login_cookie(app.app_url, user, USERS[user])


async def opened(app, user: str) -> WatchedChat:
    chat = WatchedChat(f"[{user}]")
    assert await chat.open(app.app_url, headers={"Cookie": cookie_of(app, user)}), chat.record.error
    return chat


async def turn(chat: WatchedChat, text: str) -> SessionRecord:
    """One message, and what the app answered once its turn ended (as it was then)."""
    chat.next_turn(text)
    await asyncio.wait_for(chat.ask(), 120)
    return copy.copy(chat.record)


async def ask_in_turn(url: str, cookie: str, n: int, user: str) -> list[AppChat]:
    """``n`` messages of one user, one after another, each in a new chat."""
    chats = []
    for i in range(n):
        chat = AppChat(url, i, f"[{user} {i}]", cookie)
        assert await chat.open() == ""
        await chat.ask(f"Say something, {i}.")
        await chat.close()
        chats.append(chat)
    return chats


def test_a_user_over_the_limit_is_told_when_to_retry_while_another_chats_on(limited_app):
    url = limited_app.app_url

    async def go():
        return await asyncio.gather(ask_in_turn(url, cookie_of(limited_app, "heavy"), LIMIT + 2, "heavy"),
                                    ask_in_turn(url, cookie_of(limited_app, "other"), LIMIT, "other"))
    heavy, other = asyncio.run(go())
    assert outcomes(heavy) == ["complete"] * LIMIT + [LIMITED] * 2
    assert outcomes(other) == ["complete"] * LIMIT, "another login is another user"
    said = heavy[-1].session.record.notice
    retry = RETRY.search(said)
    assert retry and 0 < int(retry.group(1)) <= 60, said
    assert f"{LIMIT} messages within a minute" in said


# --- what a refused message leaves: nothing ---------------------------------------------

BIG = 900_000  # characters: the attack's messages


def test_messages_refused_by_the_minute_limit_leave_nothing_in_the_database(limited_app):
    """The attack: messages of 900 KB over the minute's limit, in a chat and as a new chat's
    first messages.  Chainlit saves a message before on_message runs: each had added its
    900 KB (twice: the run step under it holds its text too), and a new chat's first one made
    a chat named after it.  Now the database does not change, and the user still sees why."""
    saved = SavedChats(Path(limited_app.chat_db), "mallory")
    mark = "MALLORY-" + "m" * 32

    async def go():
        chat = await opened(limited_app, "mallory")
        for _ in range(LIMIT):  # the minute's messages, as commands (no tokens): they make a chat
            assert (await turn(chat, "/status")).refused == ""
        # Those saved: the commands, then (last of each) their notices.
        await until(lambda: [text for kind, text, _ in saved.steps() if kind == "user_message"] == ["/status"] * LIMIT
                    and sum(text.startswith("**http") for _, text, _ in saved.steps()) == LIMIT, 60)
        before = saved.threads(), kinds(saved), characters(saved), saved.size()
        refused = [await turn(chat, f"{mark} {i} " + "x" * BIG) for i in range(3)]
        new_chat = await opened(limited_app, "mallory")  # a new chat whose every message is refused
        refused += [await turn(new_chat, f"{mark} new {i} " + "x" * BIG) for i in range(3)]
        await new_chat.close()
        await chat.close()
        return before, refused
    (threads, steps, chars, size), refused = asyncio.run(go())
    assert [r.outcome for r in refused] == [LIMITED] * 6
    assert all(f"{LIMIT} messages within a minute" in r.notice for r in refused), refused[0].notice
    assert saved.holding(mark) == 0, "a refused message was saved, or named a chat"
    assert saved.threads() == threads and len(threads) == 1
    assert kinds(saved) == steps  # not one step more
    assert characters(saved) - chars < 1000 and saved.size() - size < BIG


def kinds(saved: SavedChats) -> Counter:
    return Counter(kind for kind, _, _ in saved.steps())


def characters(saved: SavedChats) -> int:
    return sum(length for _, _, length in saved.steps())


def test_commands_count_as_messages_and_a_refused_one_is_neither_run_nor_saved(limited_app):
    saved = SavedChats(Path(limited_app.chat_db), "commander")

    async def go():
        chat = await opened(limited_app, "commander")
        commands = [await turn(chat, "/status") for _ in range(LIMIT)]
        export = await turn(chat, "/export")
        message = await turn(chat, "And a message?")
        await until(lambda: sum(text == "/status" for _, text, _ in saved.steps()) == LIMIT, 60)
        await chat.close()
        return chat, commands, export, message
    chat, commands, export, message = asyncio.run(go())
    assert [c.refused for c in commands] == [""] * LIMIT and len(chat.of_kind("status")) == LIMIT
    assert export.refused == LIMITED and f"{LIMIT} messages within a minute" in export.notice
    assert chat.of_kind("export") == [], "the refused /export ran"
    assert message.refused == LIMITED, "the commands were not counted"
    assert saved.holding("/export") == saved.holding("And a message?") == 0


# --- at once ------------------------------------------------------------------------------

def test_ten_messages_sent_at_once_under_a_small_day_of_tokens_get_one_reply(limited_app):
    """Each message reserves its prompt and its longest reply (capped at the day), so ten sent at
    once cannot all start on the room of one token: one is answered, the others are told when to
    try again.  The chat they open is named after the answered one, shortened."""
    saved = SavedChats(Path(limited_app.chat_db), "burst")
    words = "word " * 580  # 2,900 characters: each reserves nearly the whole day

    async def go():
        chat = await opened(limited_app, "burst")
        for i in range(10):
            await chat.send(f"{i}: {words}")
        await until(lambda: len(chat.replies()) + len(chat.of_kind("limited")) >= 10, 240)
        await until(lambda: len(saved.threads()) == 1 and saved.threads()[0][1], 60)
        await chat.close()
        return chat
    chat = asyncio.run(go())
    refusals = chat.of_kind("limited")
    assert (len(chat.replies()), len(refusals)) == (1, 9), chat.shown
    over_the_day = [t for t in refusals if f"{DAY_TOKENS:,} tokens" in t]
    assert over_the_day and all("Try again in" in t for t in over_the_day), refusals
    (_, name), = saved.threads()
    assert len(name) <= NAME_CHARS and words[:100] in name
    assert [kind for kind, _, _ in saved.steps()].count("user_message") == 1


def test_replies_past_the_cap_on_one_socket_are_refused_and_not_saved(limited_app):
    """One socket asks for a third reply while two of its own stream: it is told so, and neither
    answered nor saved; once they have ended, the user's next message is answered."""
    saved = SavedChats(Path(limited_app.chat_db), "juggler")
    third = "A third, past the cap."

    async def go():
        chat = await opened(limited_app, "juggler")
        await chat.settings({"max_tokens": 1000})  # replies that run for seconds (ignore_eos)
        for text in ("One.", "Two."):
            await chat.send(text)
        await until(lambda: len(chat.streaming) == REPLIES_AT_ONCE, 120)
        await chat.send(third)
        await until(lambda: chat.of_kind("limited"), 60)
        still_streaming = not chat.replies()
        await until(lambda: len(chat.replies()) == REPLIES_AT_ONCE, 600)
        await chat.close()
        new_chat = await opened(limited_app, "juggler")  # its prompt fits what the day has left
        after = await turn(new_chat, "Four.")
        await new_chat.close()
        await until(lambda: sorted(t for k, t, _ in saved.steps() if k == "user_message") == ["Four.", "One.", "Two."], 60)
        return chat, still_streaming, after
    chat, still_streaming, after = asyncio.run(go())
    refused, = chat.of_kind("limited")
    assert f"{REPLIES_AT_ONCE} replies being written" in refused and still_streaming
    assert after.outcome == "complete", after.notice
    assert saved.holding(third) == 0


# --- busy -------------------------------------------------------------------------------

# More long replies at once than the CPU build runs together (its max_num_seqs, 128, for
# the API server): the rest wait in vLLM's queue.
LOAD_REPLIES, LOAD_TOKENS = 160, 200
# vLLM's one API server streams all of them on 2 shared cores: its /metrics then answered in
# over 5 s in one full run (the other test process was busy too).
LOADED_METRICS_TIMEOUT_S = 60


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
                if await metric_async(settings.engine_base_url, "vllm:num_requests_waiting",
                                      LOADED_METRICS_TIMEOUT_S) > 1:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the load never made the engine queue requests")
            # The app's gauge reads the queue at most every MAX_AGE_S: a reading of the short
            # queue taken by the message just before may still be fresh for that long.
            await asyncio.sleep(MAX_AGE_S + 0.1)
            assert await metric_async(settings.engine_base_url, "vllm:num_requests_waiting",
                                      LOADED_METRICS_TIMEOUT_S) > 1, \
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
