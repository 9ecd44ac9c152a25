"""Read-only links to saved chats: ``/share`` makes one, ``/unshare`` takes it back.

A link is ``<origin>/shared/<token>``.  The token (``secrets.token_urlsafe``, 256 bits) is
its only key: it is stored in the chat database's ``shares`` table (server/chat_db.py)
with the chat's id, its owner and the origin the link was made for, so a link works on
every app worker and survives restarts, on SQLite as on PostgreSQL.  One link per chat:
``/share`` again gives the same one.  Only the chat's owner shares or unshares it, checked
here against the saved thread, not taken from the browser: Chainlit lets a socket name
any thread id before the chat has one of its own.

The origin: ERNIE_PUBLIC_URL when set (behind HAProxy with TLS the chat's own address is
not what readers reach), else the Origin of the owner's chat socket, which the browser
sets and app/web/origins.py has checked; the Host header, which anyone can forge, never.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

from sqlalchemy import text as sql

from server.errors import ErnieChatError
from server.settings.network import ORIGIN

PATH = "/shared"
TOKEN_BYTES = 32
# What token_urlsafe(32) gives: anything else is not looked up.
TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


class NothingToShare(ErnieChatError, LookupError):
    """The chat is not saved yet: nothing was asked in it."""


class NotOwner(ErnieChatError, PermissionError):
    """The chat is another user's."""


@dataclass(frozen=True)
class Share:
    token: str
    thread_id: str
    owner: str
    origin: str

    def link(self, public_url: str = "") -> str:
        return f"{public_url or self.origin}{PATH}/{self.token}"


def qr_path(token: str) -> str:
    """Where the link's QR code is served (app/pages/share_page.py)."""
    return f"{PATH}/{token}/qr.svg"


def origin_for(public_url: str, socket_origin: Optional[str], fallback: str) -> str:
    """The origin a new link is made for: the setting, the owner's page, or ``fallback``."""
    if public_url:
        return public_url
    if socket_origin and ORIGIN.fullmatch(socket_origin.lower()):
        return socket_origin.lower()
    return fallback


async def _rows(layer, query: str, **values) -> list[dict]:
    """Run one statement in its own transaction on the data layer's database."""
    async with layer.async_session() as session:
        async with session.begin():
            result = await session.execute(sql(query), values)
            return [dict(row._mapping) for row in result.fetchall()] if result.returns_rows else []


async def _check_owner(layer, thread_id: Optional[str], user: str) -> str:
    if not thread_id:
        raise NothingToShare(thread_id)
    try:
        author = await layer.get_thread_author(thread_id)
    except ValueError as exc:  # Chainlit's answer for a thread it has not saved
        raise NothingToShare(thread_id) from exc
    if author != user:
        raise NotOwner(thread_id)
    return thread_id


def _share_of(row: dict) -> Share:
    return Share(row["token"], str(row["threadId"]), row["userIdentifier"], row["origin"])


async def share(layer, thread_id: Optional[str], user: str, origin: str) -> Share:
    """The chat's link, made now unless it has one; raises NothingToShare or NotOwner."""
    thread_id = await _check_owner(layer, thread_id, user)
    # Two /share at once (two tabs) both insert: the first wins, the other reads it back.
    await _rows(layer, 'INSERT INTO shares ("token", "threadId", "userIdentifier", "origin", "createdAt") '
                       'VALUES (:token, :thread, :user, :origin, :now) ON CONFLICT ("threadId") DO NOTHING',
                token=secrets.token_urlsafe(TOKEN_BYTES), thread=thread_id, user=user, origin=origin,
                now=datetime.now(timezone.utc).isoformat())
    rows = await _rows(layer, 'SELECT * FROM shares WHERE "threadId" = :thread', thread=thread_id)
    return _share_of(rows[0])


async def unshare(layer, thread_id: Optional[str], user: str) -> bool:
    """Take the chat's link back; False when it had none.  Raises as :func:`share`."""
    thread_id = await _check_owner(layer, thread_id, user)
    found = await _rows(layer, 'DELETE FROM shares WHERE "threadId" = :thread AND "userIdentifier" = :user '
                               'RETURNING "token"', thread=thread_id, user=user)
    return bool(found)


async def find(layer, token: str) -> Optional[Share]:
    """The share a link names; None for a malformed, unknown or taken-back token alike."""
    if not TOKEN.fullmatch(token):
        return None
    rows = await _rows(layer, 'SELECT * FROM shares WHERE "token" = :token', token=token)
    return _share_of(rows[0]) if rows else None
