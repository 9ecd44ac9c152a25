"""A chat that comes back to this worker goes on: a chat whose page came from a process that is
gone (a dead or drained worker: app/web/boot_cookie.py), and a saved chat reopened.  Its
history comes from where it was kept (app/kept/stores.py), and a reply another process left
unfinished is carried on here."""

from __future__ import annotations

import time
from dataclasses import replace

import chainlit as cl

from app import chat_metrics
from app.conversation import in_flight
from app.conversation.answer import answer
from app.conversation.chat_settings import ChatParams
from app.conversation.notices import lang
from app.kept.stores import SAVED_STEPS, remember, this_chat_files
from app.texts import text
from app.web import boot_cookie, session_tasks
from app.worker import ENGINES


def moved_here() -> bool:
    """The chat's page came from an app process that is gone (app/web/boot_cookie.py)."""
    environ = cl.context.session.environ or {}
    return boot_cookie.lost_its_process(environ.get("HTTP_COOKIE"))


def carry_over() -> bool:
    """A chat whose worker died, as its files hold it (without saved chats): its history and
    settings in this session, its reply in flight carried on here.  False if they hold nothing
    of it."""
    chat = this_chat_files()
    kept = chat.restore()
    if kept is not None:
        cl.user_session.set("conversation", kept.conversation)
        cl.user_session.set("params", kept.params)
        remember()  # this worker writes it from now on
    partial = chat.orphan()
    if partial is not None:
        session_tasks.after_start(take_over(partial, chat))
    return kept is not None or partial is not None


async def take_over(partial: in_flight.Partial, store: in_flight.ReplyStore) -> None:
    """Carry on here a reply another process left, once its writer is quiet; the chat shows
    a reply coming (Stop) meanwhile."""
    async def carry() -> None:
        resumed = await in_flight.wait_for_quiet(partial, store)
        if resumed is None:
            return
        params: ChatParams = cl.user_session.get("params")
        cl.user_session.set("params", replace(params, temperature=resumed.marker.temperature,
                                              top_p=resumed.marker.top_p,
                                              max_tokens=resumed.marker.max_tokens))
        cl.user_session.set("asked_at", time.perf_counter())
        chat_metrics.reply_taken_over()
        await answer(resumed.asked_id, resumed.asked, store, resumed=resumed)
    session_tasks.start_stoppable(carry)


def reopened_notices() -> list[tuple[str, str]]:
    """What a reopened saved chat is told, in order, as (text, kind)."""
    told = []
    if mapped := ENGINES.settle(lang()):  # first: current() then gives the model it goes on with
        told.append((mapped, "model_unknown"))
    if (engine := ENGINES.current()).asleep():  # nothing asked of it: its next message starts it
        told.append((text(lang(), "model_asleep", model=engine.name), "model_asleep"))
    if moved_here():
        told.append((text(lang(), "moved_saved"), "moved"))
    return told


async def carry_on(thread: dict) -> None:
    """A reply still streaming for a reopened saved chat goes on in this page
    (app/conversation/in_flight.py): from this process, or continued here where the process that
    made it is gone."""
    if await in_flight.attach(thread["id"]):
        return
    partial = in_flight.orphan_of(thread)
    if partial is not None:
        await take_over(partial, SAVED_STEPS)
