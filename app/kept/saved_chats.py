"""Saved chats (ERNIE_CHAT_DB): Chainlit's data layer on SQLite or PostgreSQL, a chat's
history rebuilt from its saved steps when it is resumed, and the steps as the store of the
replies in flight (app/conversation/in_flight.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Optional

import chainlit as cl

from app.conversation import versions
from app.conversation.chat_settings import ChatParams
from app.conversation.history import Conversation
from app.conversation.in_flight import MARK, Keeper, Marker, Partial, marker_of
from app.conversation.saved_metadata import saved_metadata, step_metadata
from app.texts import without_figures
from server import chat_db

UPDATE = 'UPDATE steps SET "output" = :output, "metadata" = :metadata WHERE "id" = :id'


def data_layer(target: str, kind=None):
    """Chainlit's SQLAlchemy data layer for ERNIE_CHAT_DB (the tables: server/chat_db.py), or
    ``kind``, a subclass of it (app/kept/chat_search.py), on an engine of our options: Chainlit's
    default pool (5 + 10) runs out at about ten chats on PostgreSQL (Chainlit #2111), its
    SQLite settings lose writes under several workers (chat_db.engine_options)."""
    from chainlit.data.sql_alchemy import SQLAlchemyDataLayer
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    from sqlalchemy.orm import sessionmaker
    layer = (kind or SQLAlchemyDataLayer)(conninfo=chat_db.data_layer_url(target))
    layer.engine = create_async_engine(layer._conninfo, **chat_db.engine_options(target))
    if not chat_db.is_postgres(target):
        event.listen(layer.engine.sync_engine, "connect", _sqlite_pragmas)
    layer.async_session = sessionmaker(bind=layer.engine, expire_on_commit=False, class_=AsyncSession)
    return layer


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    for pragma in chat_db.SQLITE_PRAGMAS:
        cursor.execute(pragma)
    cursor.close()


async def save_settings(session) -> None:
    """The panel's values into the thread's metadata now, not only when the page closes
    (Chainlit's own save): a chat resumed after a crash still gets its settings."""
    from chainlit.data import get_data_layer
    if session.thread_id and session.has_first_interaction:
        await get_data_layer().update_thread(session.thread_id,
                                             metadata={"chat_settings": session.chat_settings})


def thread_profile(thread: dict) -> Optional[str]:
    """A saved chat's chat profile (its model, or with one model its persona), as Chainlit
    keeps it in the thread's metadata."""
    profile = saved_metadata(thread.get("metadata")).get("chat_profile")
    return profile if isinstance(profile, str) else None


def conversation_from_thread(thread: dict, system_prompt: str) -> tuple[Conversation, versions.Book]:
    """Rebuild the model's history from saved steps: user messages and replies only; and
    the earlier versions of its turns, from their replies' metadata (app/conversation/versions.py).

    The last reply to a message wins, as it did in the chat; a reply still being made
    (app/conversation/in_flight.py) is not a turn yet.  Attached files were not saved: only the typed
    text comes back.
    """
    conversation, book = Conversation(system_prompt), {}
    asked: Optional[dict] = None  # the last user step
    for step in sorted(thread.get("steps") or [], key=lambda s: s.get("createdAt") or ""):
        metadata = step_metadata(step)
        if step.get("type") == "user_message":
            asked = step
            conversation.ask(step["id"], step.get("output") or "")
        elif (step.get("type") == "assistant_message" and metadata.get("kind") == "reply" and asked
              and marker_of(metadata) is None):  # a reply still being made is not history yet
            user = asked.get("output") or ""
            conversation.ask(asked["id"], user)  # forgets an earlier reply to the same message
            conversation.add(user, without_figures(step.get("output") or ""))
            found = versions.from_metadata(metadata.get(versions.KEY), step["id"])
            if found is not None and found[0] == asked["id"]:
                book[found[0]] = found[1]
    versions.prune(book, conversation)
    return conversation, book


@dataclass
class SavedSteps:
    """Replies in flight kept as their own steps, the marker in the metadata.

    A save cost the app 1.3-2.4 ms of CPU (an UPDATE through Chainlit's SQLAlchemy layer,
    PostgreSQL on the same machine), hence in_flight.SAVES_PER_S.  At the end the step is
    written once more without the marker (or goes, if it never got text), so Chainlit's own
    save of the finished message is the last word.
    """

    _created: set[str] = field(default_factory=set)  # steps of replies streaming here

    def keep(self, conversation: Conversation, params: ChatParams) -> None:
        """Nothing to do: a saved chat's history is its steps, which Chainlit saves, and its
        settings are in its metadata (:func:`save_settings`)."""

    async def save(self, keeper: Keeper, marker: Marker) -> None:
        await self._write(keeper, {**(keeper.reply.metadata or {}), MARK: asdict(marker)})

    async def ended(self, keeper: Keeper) -> None:
        if keeper.reply.content:
            await self._write(keeper, dict(keeper.reply.metadata or {}))
        elif keeper.reply.id in self._created:
            await _layer().delete_step(keeper.reply.id)
        self._created.discard(keeper.reply.id)

    async def current(self, partial: Partial) -> Optional[Partial]:
        step = await _layer().get_step(partial.step_id)
        if not step:
            return None
        step["metadata"] = step_metadata(step)
        marker = marker_of(step.get("metadata"))
        if marker is None:  # it finished meanwhile: the page gets it whole, not its start
            await cl.context.emitter.update_step(step)
            return None
        return Partial(partial.step_id, step.get("output") or "", partial.asked_id, partial.asked, marker)

    async def _write(self, keeper: Keeper, metadata: dict) -> None:
        reply = keeper.reply
        if reply.id in self._created:  # the row exists: only its text and marker change
            await _layer().execute_sql(UPDATE, {"id": reply.id, "output": reply.content,
                                                "metadata": json.dumps(metadata)})
        else:
            await _layer().create_step({**reply.to_dict(), "output": reply.content, "metadata": metadata})
            self._created.add(reply.id)


def _layer():
    from chainlit.data import get_data_layer
    return get_data_layer()
