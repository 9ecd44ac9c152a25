"""app/engine/failover: a reply across engines that fail under it.

A fake upstream (a few lines of asyncio) plays the engine: it cuts a stream after a chosen
number of tokens or refuses a request, which a real vLLM does not do on demand. The real
kill -9 of an engine under a reply is in tests/stack/test_faults.py (one copy) and
tests/stack/test_scale.py (two copies behind HAProxy).
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import aclosing

import httpx
import openai
import pytest

from app.engine import continuation
from app.engine.engine_client import ReplyStats, make_client
from app.engine.failover import TELL_AFTER_TRIES, resilient_reply, when_engine_answers
from server.engine_state import DEATH_NOTICE_S, may_come_back
from server.settings import Settings


class Engine:
    """Serves each request from a script: ("cut", n) streams n tokens then drops the
    connection, ("close",) drops it before answering, ("ok", n) streams n tokens and ends."""

    def __init__(self, script):
        self.script, self.bodies = list(script), []

    async def handle(self, reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        body = json.loads(await reader.readexactly(length))
        self.bodies.append(body)
        action, *n = self.script.pop(0)
        if action == "close":
            writer.transport.abort()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        start = 0 if body["messages"][-1]["role"] == "user" else len(body["messages"][-1]["content"].split())
        prompt = 10 + start
        for i in range(n[0]):
            data = json.dumps({"choices": [{"delta": {"content": f"w{start + i} "}}],
                               "usage": {"prompt_tokens": prompt, "completion_tokens": i + 1}}).encode()
            piece = b"data: %s\n\n" % data
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        if action == "cut":
            writer.transport.abort()
            return
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        await writer.drain()
        writer.close()


@pytest.fixture
def quick_pauses(monkeypatch):
    """The pauses between tries a tenth as long: these tests count tries and notices, and the
    real pauses (0.5 s doubling to 4 s, tests/unit/test_continuation.py) would make them wait
    seconds each. The bound on the whole wait is tested with the real ones."""
    monkeypatch.setattr(continuation, "FIRST_PAUSE_S", continuation.FIRST_PAUSE_S / 10)
    monkeypatch.setattr(continuation, "LONGEST_PAUSE_S", continuation.LONGEST_PAUSE_S / 10)


async def reply(engine: Engine, *, can_continue=True, wait_s=5.0, max_tokens=8, shown="", produced=0):
    server = await asyncio.start_server(engine.handle, "127.0.0.1", 0)
    waits = []

    async def on_wait():
        waits.append(True)
    async with server:
        settings = Settings(_env_file=None, engine_url=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        stats, pieces = ReplyStats(), []
        messages = [{"role": "user", "content": "Count."}]
        async with make_client(settings) as client:
            try:
                async with aclosing(resilient_reply(
                        client, "m", messages, stats, temperature=0.0, top_p=1.0,
                        max_tokens=max_tokens, extra_body={"seed": 1}, can_continue=can_continue,
                        wait_s=wait_s, on_wait=on_wait, shown=shown, produced=produced)) as stream:
                    async for piece in stream:
                        pieces.append(piece)
            except openai.APIError as exc:
                return "".join(pieces), stats, waits, exc
    return "".join(pieces), stats, waits, None


async def test_a_reply_cut_mid_stream_goes_on_from_its_text_as_one_reply():
    engine = Engine([("cut", 3), ("ok", 5)])
    text, stats, waits, error = await reply(engine)
    assert error is None and text == "w0 w1 w2 w3 w4 w5 w6 w7 "
    assert (stats.continued, stats.prompt_tokens, stats.completion_tokens) == (1, 10, 8)
    again = engine.bodies[1]
    assert again["messages"][-1] == {"role": "assistant", "content": "w0 w1 w2 "}
    assert (again["max_tokens"], again["continue_final_message"], again["add_generation_prompt"],
            again["seed"]) == (5, True, False, 1)
    assert not waits  # another engine took it at once: nothing to tell


async def test_a_reply_cut_before_its_first_token_is_sent_again_unchanged():
    engine = Engine([("close",), ("ok", 8)])
    text, stats, waits, error = await reply(engine)
    assert error is None and len(text.split()) == 8 and stats.continued == 0
    assert engine.bodies[0] == engine.bodies[1]


async def test_the_chat_is_told_when_the_reply_waits_for_an_engine_to_come_back(quick_pauses):
    engine = Engine([("cut", 2), ("close",), ("close",), ("close",), ("ok", 6)])
    text, stats, waits, error = await reply(engine)
    assert error is None and text.split()[-1] == "w7" and waits == [True] and stats.continued == 1


async def test_the_wait_is_bounded_and_the_text_so_far_kept():
    engine = Engine([("cut", 2)] + [("close",)] * 50)
    started = time.monotonic()
    text, stats, waits, error = await reply(engine, wait_s=2.5)
    assert error is not None and text == "w0 w1 " and waits == [True]
    assert 2.5 <= time.monotonic() - started < 4.5  # the last try's pause ends at the limit
    assert len(engine.bodies) < 8  # pauses between the tries, not a busy loop


async def test_a_reply_another_process_began_is_continued_from_its_first_request():
    """A takeover (app/conversation/in_flight.py): the text saved by a dead worker goes on, within what is left."""
    engine = Engine([("ok", 3)])
    text, stats, waits, error = await reply(engine, shown="w0 w1 w2 w3 w4 ", produced=5)
    assert error is None and text == "w5 w6 w7 "       # only the new part is yielded
    first = engine.bodies[0]
    assert first["messages"][-1] == {"role": "assistant", "content": "w0 w1 w2 w3 w4 "}
    assert (first["max_tokens"], first["continue_final_message"], first["add_generation_prompt"]) == (3, True, False)
    assert stats.completion_tokens == 8


async def test_a_server_that_cannot_continue_keeps_the_cut_as_an_error():
    engine = Engine([("cut", 2), ("ok", 6)])
    text, stats, waits, error = await reply(engine, can_continue=False)
    assert error is not None and text == "w0 w1 " and len(engine.bodies) == 1


# --- the steps before a reply (app/engine/failover.when_engine_answers) -----------------------------

def failing(errors: list, value="ready"):
    """An async call that raises ``errors`` in turn, then returns ``value``; counts its calls."""
    calls = []

    async def call():
        calls.append(time.monotonic())
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return value
    return call, calls


def http_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://engine/tokenize")
    return httpx.HTTPStatusError(f"{status}", request=request, response=httpx.Response(status, request=request))


async def test_the_count_before_a_reply_waits_for_an_engine_that_is_away(quick_pauses):
    gone = openai.APIConnectionError(request=httpx.Request("POST", "http://engine/tokenize"))
    call, calls = failing([gone] * 4)
    waits = []

    async def on_wait():
        waits.append(True)
    assert await when_engine_answers(call, 10.0, on_wait) == "ready"
    assert len(calls) == 5 and waits == [True]   # told once, after the quick tries


async def test_an_engine_error_is_tried_a_few_times_then_raised(quick_pauses):
    async def on_wait():
        raise AssertionError("a failing engine is not an engine that is away")
    call, calls = failing([http_error(500)] * 2)
    assert await when_engine_answers(call, 10.0, on_wait) == "ready"
    call, calls = failing([http_error(500)] * 10)
    with pytest.raises(httpx.HTTPStatusError):
        await when_engine_answers(call, 10.0, on_wait)
    assert len(calls) == TELL_AFTER_TRIES
    call, calls = failing([ValueError("not the engine's")])
    with pytest.raises(ValueError):
        await when_engine_answers(call, 10.0, on_wait)
    assert len(calls) == 1


async def test_an_engine_that_will_not_come_back_is_said_down_after_the_quick_tries(quick_pauses):
    gone = openai.APIConnectionError(request=httpx.Request("POST", "http://engine/tokenize"))
    asked = []

    def may_come_back(away_s: float) -> bool:
        asked.append(away_s)
        return len(asked) < 3  # the supervisor notices the death on its third look

    async def on_wait():
        pass
    call, calls = failing([gone] * 20)
    with pytest.raises(openai.APIConnectionError):
        await when_engine_answers(call, 60.0, on_wait, may_come_back)
    assert len(calls) == TELL_AFTER_TRIES + 2 and asked == sorted(asked) and asked[0] > 0


@pytest.mark.parametrize("state, away_s, wait", [
    ({"state": "restarting"}, 100.0, True), ({"state": "starting"}, 100.0, True),
    ({"state": "asleep"}, 100.0, True),      # a model started on demand: the chat's use wakes it
    ({"state": "ready"}, 1.0, True),         # vLLM's API servers are gone before its main process
    ({"state": "ready"}, DEATH_NOTICE_S, False),
    ({"state": "failed"}, 0.0, False), ({"state": "stopped"}, 0.0, False),
    ({}, 0.0, False),                        # no supervisor: an engine elsewhere
])
def test_an_engine_is_waited_for_while_its_supervisor_may_bring_it_back(state, away_s, wait):
    assert may_come_back(state, away_s) is wait
