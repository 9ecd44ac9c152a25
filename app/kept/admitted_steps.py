"""A user's message is saved once it is admitted, and a chat is made by its first admitted one.

Chainlit 2.12 saves a message before ``on_message`` sees it: the emitter's
``process_message`` (``chainlit/emitter.py``) starts ``message._create()``, whose task hands
the step to the data layer's ``create_step``, and for a chat's first message it starts
``init_thread(message.content)``, which makes the thread, named after the message.  Then
``on_message`` runs inside a ``run`` step (``chainlit/callbacks.py``) whose input is the
message's text again.  So a message the limits refused (app/conversation/admission.py) was
kept all the same: 20 messages of 900 KB, refused by a limit of 3 a minute, added 18 MB to
the database, and a refused first message named the chat.

Here each message Chainlit's emitter takes in (and each edit) is noted before Chainlit's
code runs (:func:`install`).  The data layer (``SearchingLayer.create_step``,
app/kept/chat_search.py) asks :func:`kept` before it writes a step: a noted message, and
the ``run`` step under it, wait for ``on_message``'s decision and are written only if it
admitted the message.  ``on_message`` decides inside :func:`deciding`: admitted once it calls
:meth:`Decision.keep`, refused however else the handler ends (a refusal, an error, Stop).
A step waits at most ``WAIT_S``; then it is written, as Chainlit would have.

A chat's thread is made by its first admitted message, named after it (at most
``NAME_CHARS`` characters: the name is shown in the chat list and searched), and not by a
refused one: the emitter is kept from starting ``init_thread``, and :meth:`Decision.keep`
starts it.  While every message of a new chat has been refused, the chat stays as Chainlit
keeps one before its first message (``has_first_interaction`` false: nothing of it is saved,
not even when its page closes).

Only with saved chats (``install`` is called then); drop this module when Chainlit saves a
message after its handler accepts it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional
from weakref import WeakKeyDictionary

LOG = logging.getLogger(__name__)

WAIT_S = 30.0
NAME_CHARS = 200
# Decisions kept for the steps still to come (the run step's last update comes at the end of
# its reply): the oldest go first past this many.
MAX_NOTED = 10_000


@dataclass
class Opening:
    """A chat with no thread yet: how many of its messages wait for their decision."""

    waiting: int = 0


@dataclass
class Noted:
    """One message (or edit) taken in, and whether ``on_message`` admitted it."""

    decided: asyncio.Future
    opening: Optional[Opening] = None  # the chat it would make, if it is admitted first


NOTED: "OrderedDict[tuple[str, str], Noted]" = OrderedDict()  # by (thread id, message id)
OPENINGS: "WeakKeyDictionary[object, Opening]" = WeakKeyDictionary()  # by Chainlit session


def thread_name(content: str) -> str:
    return content if len(content) <= NAME_CHARS else content[:NAME_CHARS - 1] + "…"


def note(session, message_id: str, opens: bool = True) -> None:
    """``message_id`` came in on ``session``: its steps wait for its decision.  ``opens``: a
    new message, which makes the chat if it is the first admitted (an edit never does)."""
    opening = OPENINGS.get(session) if opens else None
    if opens and opening is None and not session.has_first_interaction:
        opening = OPENINGS[session] = Opening()
    if opening is not None:
        opening.waiting += 1
        # Chainlit's process_message starts init_thread only for a chat's first interaction.
        session.has_first_interaction = True
    key = (session.thread_id, message_id)
    NOTED.pop(key, None)
    NOTED[key] = Noted(asyncio.get_running_loop().create_future(), opening)
    while len(NOTED) > MAX_NOTED:
        NOTED.popitem(last=False)


def decide(session, emitter, message_id: str, admitted: bool, content: str) -> None:
    noted = NOTED.get((session.thread_id, message_id))
    if noted is None or noted.decided.done():
        return
    noted.decided.set_result(admitted)
    opening, noted.opening = noted.opening, None
    if opening is None or OPENINGS.get(session) is not opening:
        return
    opening.waiting -= 1
    if admitted:
        del OPENINGS[session]
        from chainlit.emitter import ChainlitEmitter
        # Chainlit's own (this module wraps process_message only): thread, name, queued steps.
        asyncio.create_task(ChainlitEmitter.init_thread(emitter, thread_name(content)))
    elif opening.waiting <= 0:
        del OPENINGS[session]
        session.has_first_interaction = False  # as before the chat's first message


async def kept(step: dict) -> bool:
    """Whether the data layer writes ``step``: not a message ``on_message`` refused, nor the run
    step under it; a step of no noted message at once."""
    thread_id = step.get("threadId") or ""
    noted = NOTED.get((thread_id, step.get("id") or ""))
    if noted is None and step.get("type") == "run" and step.get("parentId"):
        noted = NOTED.get((thread_id, step["parentId"]))
    if noted is None:
        return True
    try:
        return await asyncio.wait_for(asyncio.shield(noted.decided), WAIT_S)
    except asyncio.TimeoutError:
        LOG.warning("message %s: no decision within %.0f s, saved as Chainlit would", step.get("id"), WAIT_S)
        return True


class Decision:
    """``on_message``'s decision on one message: refused unless :meth:`keep` is called."""

    def __init__(self, session, emitter, message_id: str):
        self.session, self.emitter, self.message_id = session, emitter, message_id

    def keep(self, content: str) -> None:
        """The message is admitted: it is saved, and makes the chat if it is the first."""
        decide(self.session, self.emitter, self.message_id, True, content)

    def refuse(self) -> None:
        decide(self.session, self.emitter, self.message_id, False, "")


@contextmanager
def deciding(message_id: str) -> Iterator[Decision]:
    """The decision on the message being handled; refused if the block ends without keep()."""
    import chainlit as cl
    decision = Decision(cl.context.session, cl.context.emitter, message_id)
    try:
        yield decision
    finally:
        decision.refuse()  # nothing once kept


def _valid_id(value) -> bool:
    from app.web.session_guard import valid_session_id  # a UUID, as Chainlit's asserts
    return valid_session_id(value)


def install() -> None:
    """Note each message as Chainlit's emitter takes it in, and each edit as its socket event
    comes, before Chainlit's code saves anything of it."""
    import chainlit.socket  # noqa: F401  (registers Chainlit's handlers on the server)
    from chainlit.emitter import ChainlitEmitter
    from chainlit.server import sio
    from chainlit.session import WebsocketSession

    chainlit_process = ChainlitEmitter.process_message

    async def process_message(self, payload):
        message_id = (payload.get("message") or {}).get("id")
        if _valid_id(message_id):
            note(self.session, message_id)
        return await chainlit_process(self, payload)

    ChainlitEmitter.process_message = process_message

    chainlit_edit = sio.handlers["/"]["edit_message"]

    async def edit_message(sid, payload):
        session = WebsocketSession.get(sid)
        message_id = ((payload or {}).get("message") or {}).get("id") if isinstance(payload, dict) else None
        if session is not None and _valid_id(message_id):
            note(session, message_id, opens=False)
        return await chainlit_edit(sid, payload)

    sio.handlers["/"]["edit_message"] = edit_message
