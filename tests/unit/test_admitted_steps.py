"""app/kept/admitted_steps.py: a message's steps wait for on_message's decision and are written
only if it was admitted; a chat is made by its first admitted message, named after it.

Sessions and the emitter are stand-ins; tests/app/test_limits_stack.py performs the attacks on
the real app and its database.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from chainlit.emitter import ChainlitEmitter

from app.kept import admitted_steps as steps


class Session:
    def __init__(self, first_done: bool = False):
        self.thread_id = str(uuid.uuid4())
        self.has_first_interaction = first_done


@pytest.fixture
def made(monkeypatch):
    """The threads made, as (session's thread, name): Chainlit's init_thread, recorded."""
    threads = []

    async def init_thread(emitter, interaction):
        threads.append((emitter.thread_id, interaction))
    monkeypatch.setattr(ChainlitEmitter, "init_thread", init_thread)
    monkeypatch.setattr(steps, "NOTED", type(steps.NOTED)())
    return threads


def step(session, message_id, **fields) -> dict:
    return {"threadId": session.thread_id, "id": message_id, "type": "user_message", **fields}


async def settled() -> None:
    """Let the tasks started so far run to their next wait."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_refused_message_and_its_run_step_are_not_written(made):
    session = Session(first_done=True)
    steps.note(session, "m1")
    writes = [asyncio.create_task(steps.kept(step(session, "m1"))),
              asyncio.create_task(steps.kept({"threadId": session.thread_id, "id": "r1", "type": "run",
                                              "parentId": "m1"}))]
    await settled()
    assert not any(w.done() for w in writes)  # each waits for the decision
    steps.Decision(session, session, "m1").refuse()
    assert await asyncio.gather(*writes) == [False, False]
    # The run step's last update, at the end of on_message, is not written either.
    assert not await steps.kept({"threadId": session.thread_id, "id": "r1", "type": "run", "parentId": "m1"})
    assert made == []


async def test_an_admitted_message_is_written_and_a_step_of_no_noted_message_at_once(made):
    session = Session(first_done=True)
    steps.note(session, "m1")
    decision = steps.Decision(session, session, "m1")
    decision.keep("hello")
    decision.refuse()  # the handler's end: nothing changes once kept
    assert await steps.kept(step(session, "m1"))
    assert await steps.kept(step(session, "reply", type="assistant_message"))
    # Another chat's step with the same message id is not this one's.
    assert await steps.kept(step(Session(), "m1"))
    assert made == []  # the chat had its thread already


async def test_the_type_a_client_gives_its_message_does_not_let_it_past(made):
    session = Session(first_done=True)
    steps.note(session, "m1")
    write = asyncio.create_task(steps.kept(step(session, "m1", type="assistant_message")))
    steps.Decision(session, session, "m1").refuse()
    assert not await write


async def test_a_chat_is_made_by_its_first_admitted_message_not_a_refused_one(made):
    session = Session()
    for message_id in ("m1", "m2", "m3"):  # sent at once, before the chat has a thread
        steps.note(session, message_id)
    assert session.has_first_interaction  # Chainlit's process_message then starts no init_thread
    steps.Decision(session, session, "m2").refuse()
    steps.Decision(session, session, "m3").keep("x" * 900_000)
    steps.Decision(session, session, "m1").keep("the second admitted")
    await settled()
    assert made == [(session.thread_id, "x" * (steps.NAME_CHARS - 1) + "…")]
    assert session.has_first_interaction


async def test_a_chat_whose_messages_were_all_refused_is_as_before_its_first(made):
    session = Session()
    steps.note(session, "m1")
    steps.note(session, "m2")
    steps.Decision(session, session, "m1").refuse()
    assert session.has_first_interaction  # m2 still waits
    steps.Decision(session, session, "m2").refuse()
    assert not session.has_first_interaction and made == []  # nothing of it is saved, not even on close
    steps.note(session, "m3")  # the next message starts over
    steps.Decision(session, session, "m3").keep("a short one")
    await settled()
    assert made == [(session.thread_id, "a short one")]


async def test_an_edit_is_decided_again_and_never_makes_a_chat(made):
    session = Session(first_done=True)
    steps.note(session, "m1")
    steps.Decision(session, session, "m1").refuse()
    steps.note(session, "m1", opens=False)  # the refused message edited: its new text waits again
    write = asyncio.create_task(steps.kept(step(session, "m1")))
    steps.Decision(session, session, "m1").keep("edited")
    assert await write and made == []


async def test_a_step_waits_a_bounded_time_then_is_written_as_chainlit_would(made, monkeypatch):
    monkeypatch.setattr(steps, "WAIT_S", 0.01)
    session = Session(first_done=True)
    steps.note(session, "m1")
    assert await steps.kept(step(session, "m1"))


async def test_the_decisions_kept_are_bounded(made, monkeypatch):
    monkeypatch.setattr(steps, "MAX_NOTED", 3)
    session = Session(first_done=True)
    for i in range(5):
        steps.note(session, f"m{i}")
    assert [key[1] for key in steps.NOTED] == ["m2", "m3", "m4"]


def test_a_short_first_message_names_the_chat_as_it_is():
    assert steps.thread_name("hello") == "hello"
    assert len(steps.thread_name("y" * 10_000)) == steps.NAME_CHARS
