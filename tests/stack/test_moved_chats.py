"""A dead worker's chats without saved chats (the default: no login, no chat database), for
real: `ernie-chat up` with two app workers behind HAProxy, one killed with SIGKILL while its
chat's reply streams.  The chat's socket comes back, as the browser's does, to the other
worker, which finds the chat's files (app/kept/chat_files.py) by the session id and carries the
reply on into the same message, then the chat on with its history.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import signal
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from app.kept.chat_files import file_key
from server.loadtest.lib import kills
from server.loadtest.lib.chat_record import FIGURES_TAIL, SessionRecord
from server.loadtest.lib.chat_socket import ChatSession
from tests.support.stack_process import Up, serving
from tests.support.chat import page_of_worker, run, until

# Tokens: the kill lands mid-reply (about 3 s of it stream alone on an idle engine, the kill
# comes a second in); two turns and a reply still fit the session engine's 4,096-token window.
LONG_REPLY = 1200
PROMPT_TOKENS = re.compile(r"(\d+) prompt \+")


@pytest.fixture(scope="module")
def stack(engine, tmp_path_factory):
    """The workers are what dies here: the session's engine serves them."""
    settings, _ = engine
    yield from serving(Up(tmp_path_factory.mktemp("moved"), ERNIE_APP_WORKERS="2",
                          ERNIE_ENGINE_URL=settings.engine_base_url, ERNIE_WARMUP="false",
                          ERNIE_MAX_MODEL_LEN=str(settings.max_model_len), ERNIE_IGNORE_EOS="true",
                          ERNIE_MAX_TOKENS=str(LONG_REPLY), ERNIE_REQUEST_TIMEOUT_S="20"))


def kept_text(path) -> str:
    """The reply's text as its file holds it ("" while there is none)."""
    try:
        return json.loads(path.read_text())["text"]
    except (OSError, ValueError, KeyError):
        return ""


def prompt_of(record: SessionRecord) -> int:
    """The prompt's tokens, as the reply's figures give them."""
    return int(PROMPT_TOKENS.search(FIGURES_TAIL.search(record.final).group()).group(1))


def test_a_dead_workers_chat_goes_on_with_its_reply_and_history_without_saved_chats(stack):
    """Worker 1 is killed while the chat's second reply streams: the reply finishes on worker 0
    in the same message, continued from the text kept before the kill (which the browser had
    shown), with the mark of a reply carried on; the next message is answered with both turns
    in the model's history."""
    browser = page_of_worker(stack.url, 1)
    session = ChatSession(SessionRecord(0, "", "Question 1."), reconnect=True)
    live_chats = Path(stack.env["ERNIE_LIVE_CHATS_DIR"])
    reply_file = live_chats / f"{file_key(session.session_id)}.reply"
    mark = len(stack.lines)

    async def go():
        assert await asyncio.wait_for(session.open(stack.url, headers={"Cookie": browser}), 120)
        await asyncio.wait_for(session.ask(), 600)
        first = copy.copy(session.record)
        session.next_turn("Question 2.")
        asking = asyncio.create_task(session.ask())
        await until(lambda: kept_text(reply_file), 300)  # some of it kept, more to come
        victim = kills.find(kills.parse_kill("worker:1@0"), urlsplit(stack.url).port)
        os.killpg(victim.pid, signal.SIGKILL)
        kept_at_kill = kept_text(reply_file)  # what the next worker goes on from: its writer is dead
        # What the page showed: every frame before the socket closed (it comes back 1 s later).
        await until(lambda: not session.sio.connected, 30)
        shown_when_killed = session.record.streamed
        reply_id = session.record.reply_id
        await asyncio.wait_for(asking, 600)
        continued = copy.copy(session.record)
        assert continued.reply_id == reply_id  # the browser's message goes on: not a second one
        session.next_turn("Question 3.")
        await asyncio.wait_for(session.ask(), 600)
        after = copy.copy(session.record)
        await session.close()
        return first, continued, after, shown_when_killed, kept_at_kill
    first, continued, after, shown_when_killed, kept_at_kill = run(go())

    assert first.complete and not first.moved, first.error
    assert continued.outcome == "continued" and continued.moved and continued.continued, continued.error
    # Continued, not started again: the text kept goes on in the same message, to a reply whose
    # parts add up to one whole reply. The page had shown that text (the last frames before a
    # save may still have been on their way) and more, which the continuation writes anew.
    assert kept_at_kill and (shown_when_killed.startswith(kept_at_kill)
                             or kept_at_kill.startswith(shown_when_killed))
    assert continued.final.startswith(kept_at_kill) and len(continued.streamed) > len(shown_when_killed)
    assert continued.reply_tokens == LONG_REPLY
    # The history went along: the reply carried on was asked with the first turn (from the dead
    # worker's file), the next message with both. A reply's text counted again from its text
    # may take fewer tokens than it was generated in, hence a third of one as the bound.
    assert after.complete, after.error
    assert prompt_of(first) < 100
    assert prompt_of(continued) > prompt_of(first) + LONG_REPLY // 3
    assert prompt_of(after) > prompt_of(continued) + LONG_REPLY // 3
    stack.wait_for(r"\[app 1\] restarting in", after=mark, timeout_s=120)
