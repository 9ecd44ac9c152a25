"""The ◀ k/N ▶ buttons under a reply that has earlier versions (app/conversation/versions.py), and
the switch they make in the chat: the reply's text, and for an edit the user message and
the turns that followed that version, shown in place of the others."""

from __future__ import annotations

from typing import Callable, Optional

import chainlit as cl

from app.conversation import regenerate, versions
from app.conversation.history import Conversation, Turn
from app.conversation.saved_metadata import saved_metadata
from app.texts import text

ACTION = "version"
Render = Callable[[Turn], str]  # a turn's reply as the chat shows it


def book() -> versions.Book:
    found = cl.user_session.get("versions")
    if found is None:
        found = {}
        cl.user_session.set("versions", found)
    return found


def restore(saved: versions.Book) -> None:
    """A reopened saved chat's versions.  Chainlit gave the session back from JSON, in which
    the earlier page's buttons are nulls: they are gone with that page."""
    cl.user_session.set("versions", saved)
    cl.user_session.set("version_actions", {})


async def offer(message_id: str, entry: versions.Versions, lang: str) -> None:
    """Put ◀ k/N ▶ under the turn's reply, in place of the buttons it had."""
    await withdraw(message_id)
    k, n = entry.label()
    actions = [cl.Action(name=ACTION, payload=versions.payload(message_id, entry, step), label=label,
                         tooltip=text(lang, "version_tip", k=k, n=n))
               for step, label in ((-1, "◀"), (0, text(lang, "version_at", k=k, n=n)), (1, "▶"))]
    for action in actions:
        await action.send(for_id=entry.reply_id)
    cl.user_session.set("version_actions", {**_offered(), message_id: actions})


async def offer_all(lang: str) -> None:
    """Every switcher of a reopened saved chat."""
    for message_id, entry in book().items():
        await offer(message_id, entry, lang)


async def withdraw(message_id: str) -> None:
    offered = _offered()
    for action in offered.pop(message_id, ()):
        await action.remove()
    cl.user_session.set("version_actions", offered)


def metadata(message_id: str, entry: versions.Versions) -> dict:
    return {versions.KEY: versions.to_metadata(message_id, entry)}


async def answering(conversation: Conversation, message_id: str) -> None:
    """Before ``message_id`` is answered (again): its turn as shown is kept as a version, and
    its old reply's buttons go with that reply."""
    versions.snapshot(book(), conversation, message_id)
    await withdraw(message_id)


async def send_reply(conversation: Conversation, message_id: str, reply: cl.Message, lang: str) -> None:
    """Send a reply that just entered the history; if its turn has earlier versions, they
    ride in its metadata and the switcher comes under it."""
    entry = versions.settle(book(), conversation, message_id, reply.id)
    if entry is not None:
        reply.metadata = {**(reply.metadata or {}), **metadata(message_id, entry)}
    await reply.send()
    if entry is not None:
        await _withdraw_gone()  # an edit above took those turns away
        await offer(message_id, entry, lang)


async def switch(action: cl.Action, conversation: Conversation, render: Render, lang: str) -> bool:
    """Show the version a click asks for; False, changing nothing, for a click this chat did
    not offer (a forged payload)."""
    found = versions.checked(action.payload, action.forId, book(), conversation)
    if found is None:
        return False
    message_id, to = found
    entry = book()[message_id]
    before = versions.turn_index(conversation, message_id)
    chosen = versions.choose(book(), conversation, message_id, to)
    await _withdraw_gone()  # the turns after it: their messages go
    shown = {m.id: m for m in cl.chat_context.get()}
    asked: Optional[cl.Message] = shown.get(message_id)
    if asked is not None and asked.content != chosen[0].user:
        asked.content = chosen[0].user
        await asked.update()
    await clear_after(entry.reply_id)
    reply = shown.get(entry.reply_id)
    if reply is not None:
        reply.content = render(chosen[0])
        reply.metadata = {**saved_metadata(reply.metadata), **metadata(message_id, entry)}
        await reply.update()
    for index, turn in enumerate(chosen[1:], before + 1):
        again = await cl.Message(content=turn.user, type="user_message",
                                 author=asked.author if asked else None).send()
        versions.asked_again(conversation, again.id, index, turn.user)
        await cl.Message(content=render(turn), metadata={"kind": "reply"}).send()
    await offer(message_id, entry, lang)
    await regenerate.withdraw()  # its message may have gone: it comes under the last one again
    await regenerate.offer(lang)
    return True


async def clear_after(message_id: str) -> None:
    """Take away what the chat shows after a message: Regenerate does it after the user
    message, as Chainlit does for an edit; a switch after the reply."""
    shown = cl.chat_context.get()
    ids = [m.id for m in shown]
    if message_id in ids:
        for message in shown[ids.index(message_id) + 1:]:
            await message.remove()


async def _withdraw_gone() -> None:
    """The buttons of turns whose versions are forgotten."""
    for gone in set(_offered()) - set(book()):
        await withdraw(gone)


def _offered() -> dict[str, list[cl.Action]]:
    return dict(cl.user_session.get("version_actions") or {})
