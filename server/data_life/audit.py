"""The commands' part of the audit (server/chat_records.py): ``revoke-sessions`` and ``delete-user``
record what they did in the chat database, as the app's workers record sign-ins and shares; and
``ernie-chat audit`` prints the newest records.  Without saved chats (ERNIE_CHAT_DB unset) no
audit is kept."""

from __future__ import annotations

import asyncio
from typing import Optional

from server.chat_records import AUDIT_TABLE, COMMAND_LINE, INSERT_AUDIT, RECENT_AUDIT_SQL, audit_row, numbered
from server.settings import Settings

from server.data_life.database import Database, open_chat_db
from server.data_life.places import places_of


async def write(db: Database, action: str, name: str) -> None:
    """One record of a command, once the app has made the table (at its first start)."""
    if AUDIT_TABLE in await db.tables():
        statement, values = numbered(INSERT_AUDIT, audit_row(action, name, COMMAND_LINE))
        await db.execute(statement, *values)


def _on_chat_db(settings: Settings, work):
    places = places_of(settings)
    if places.chat_db is None:
        return None

    async def run():
        db = await open_chat_db(places.chat_db, places.postgres)
        try:
            return await work(db)
        finally:
            await db.close()
    return asyncio.run(run())


def record(settings: Settings, action: str, name: str) -> None:
    _on_chat_db(settings, lambda db: write(db, action, name))


def recent(settings: Settings, limit: int) -> Optional[list[dict]]:
    """The newest ``limit`` records, newest first; None without a chat database."""
    async def read(db: Database) -> list[dict]:
        if AUDIT_TABLE not in await db.tables():
            return []
        statement, values = numbered(RECENT_AUDIT_SQL, {"limit": limit})
        return await db.fetch(statement, *values)
    return _on_chat_db(settings, read)
