"""Saved prompts: Chainlit's favorite messages, kept with the saved chats.

A user's message gets a star (hover it); the star button of the composer lists the starred
messages of all the user's chats, newest first, and puts the one picked into the composer,
in any chat.  Chainlit 2.12 keeps the star in the step's metadata (``"favorite": true``) through
the data layer, and asks the data layer for a user's starred steps on every connection.

Its SQLAlchemy layer looks for them with ``metadata LIKE``, which PostgreSQL refuses on the
JSONB column (server/chat_db.py), so on PostgreSQL the list stayed empty: here the column is
cast to text first, which both databases write as ``"favorite": true``.  Only with saved chats:
without a data layer a star would last as long as the page.
"""

from __future__ import annotations

from chainlit.config import config as chainlit_config

from app.conversation.saved_metadata import step_metadata

# The composer's list shows a few at a time; a user with more sees the newest.
MOST = 200
STARRED = """
    SELECT s."id", s."threadId", s."name", s."type", s."output", s."metadata", s."createdAt"
    FROM steps s JOIN threads t ON s."threadId" = t."id"
    WHERE t."userId" = :user_id AND s."type" = 'user_message'
      AND CAST(s."metadata" AS TEXT) LIKE :starred
    ORDER BY s."createdAt" DESC LIMIT :most
"""


def install() -> None:
    chainlit_config.features.favorites = True


async def starred(layer, user_id: str) -> list[dict]:
    """The user's starred messages as Chainlit's page lists them; the few columns written back
    when a star is taken off (Chainlit's upsert sets only the keys it is given)."""
    rows = await layer.execute_sql(STARRED, {"user_id": user_id, "starred": '%"favorite": true%', "most": MOST})
    steps = [{**row, "metadata": step_metadata(row)} for row in rows or []]
    return [step for step in steps if step["metadata"].get("favorite") is True]
