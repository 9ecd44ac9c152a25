"""The per-user limits' tests: the limit, what each message met, chats that see every message
the app shows, and what the saved chats' database holds."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Optional

import httpx

from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.chat_socket import ChatSession, user_step
from server.loadtest.users.chats import AppChat

LIMIT = 3  # messages a minute: one comes back every 20 s


def outcomes(chats: list[AppChat]) -> list[str]:
    return [chat.session.record.outcome for chat in chats]


def login_cookie(url: str, user: str, password: str) -> str:
    response = httpx.post(f"{url}/login", data={"username": user, "password": password}, timeout=60)
    assert response.status_code == 200, response.text
    return f"access_token={response.cookies['access_token']}"


class WatchedChat(ChatSession):
    """A chat over the app's socket that keeps every message the app showed: (kind, text) by
    message id, the last version of each; for messages sent at once, without waiting."""

    def __init__(self, tag: str = ""):
        super().__init__(SessionRecord(0, tag, prompt=""))
        self.shown: dict[str, tuple[Optional[str], str]] = {}
        self.streaming: set[str] = set()  # replies that began

    def _on_event(self, event: str, data=None) -> None:
        if isinstance(data, dict) and event in ("new_message", "update_message", "stream_start"):
            metadata = data.get("metadata")
            metadata = json.loads(metadata) if isinstance(metadata, str) else metadata or {}
            self.shown[data["id"]] = (metadata.get("kind"), data.get("output") or "")
            if event == "stream_start" and metadata.get("kind") == "reply":
                self.streaming.add(data["id"])
        super()._on_event(event, data)

    def of_kind(self, kind: str) -> list[str]:
        return [text for shown_kind, text in self.shown.values() if shown_kind == kind]

    def replies(self) -> list[str]:
        """Finished replies: with their figures line."""
        return [text for text in self.of_kind("reply") if "tok/s" in text]

    async def send(self, text: str) -> str:
        """Send a message without waiting for anything; its id."""
        step = user_step(text)
        await self.sio.emit("client_message", {"message": step, "fileReferences": []})
        return step["id"]

    async def settings(self, values: dict) -> None:
        """The settings panel changed, and the app done with it."""
        await self.sio.call("chat_settings_change", values, timeout=60)


class SavedChats:
    """What the saved chats' SQLite file holds of one user (read beside the app, as it writes)."""

    def __init__(self, path: Path, user: str):
        self.path, self.user = path, user

    def _rows(self, query: str, *args) -> list[tuple]:
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
        try:
            return db.execute(query, args).fetchall()
        finally:
            db.close()

    def threads(self) -> list[tuple[str, Optional[str]]]:
        """(id, name) of the user's chats."""
        return self._rows('SELECT "id", "name" FROM threads WHERE "userIdentifier" = ?', self.user)

    def steps(self) -> list[tuple[str, str, int]]:
        """(type, the output's first 40 characters, input and output's characters) of every step
        of the user's chats and of chats without a user (a thread Chainlit made on its own)."""
        return self._rows(
            'SELECT s."type", substr(coalesce(s."output", \'\'), 1, 40), '
            'length(coalesce(s."output", \'\')) + length(coalesce(s."input", \'\')) '
            'FROM steps s LEFT JOIN threads t ON t."id" = s."threadId" '
            'WHERE t."userIdentifier" = ? OR t."userIdentifier" IS NULL', self.user)

    def holding(self, text: str) -> int:
        """Steps and thread names anywhere in the database that hold ``text``."""
        pattern = f"%{text}%"
        steps = self._rows('SELECT count(*) FROM steps WHERE "output" LIKE ? OR "input" LIKE ?', pattern, pattern)
        names = self._rows('SELECT count(*) FROM threads WHERE "name" LIKE ?', pattern)
        return steps[0][0] + names[0][0]

    def size(self) -> int:
        """The database's bytes on disk, its write-ahead log included."""
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
