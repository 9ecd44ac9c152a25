"""Saved chats on a SQLite file, switched on by ERNIE_CHAT_DB (with login: server/passwords.py).

Chainlit shows its history sidebar only with a data layer AND authentication.
Its SQLAlchemy data layer expects tables that Chainlit documents for Postgres;
this is the SQLite version, with the ``autoCollapse`` (and other newer StepDict)
columns the documented schema lacks: without them every step insert fails with
only a warning (docs/notes.md, "Chainlit 2.12").
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from server.errors import ErnieChatError

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    "id" TEXT PRIMARY KEY, "identifier" TEXT NOT NULL UNIQUE, "metadata" TEXT NOT NULL,
    "createdAt" TEXT);
CREATE TABLE IF NOT EXISTS threads (
    "id" TEXT PRIMARY KEY, "createdAt" TEXT, "name" TEXT, "userId" TEXT, "userIdentifier" TEXT,
    "tags" TEXT, "metadata" TEXT,
    FOREIGN KEY ("userId") REFERENCES users("id") ON DELETE CASCADE);
CREATE TABLE IF NOT EXISTS steps (
    "id" TEXT PRIMARY KEY, "name" TEXT NOT NULL, "type" TEXT NOT NULL, "threadId" TEXT NOT NULL,
    "parentId" TEXT, "command" TEXT, "modes" TEXT, "streaming" BOOLEAN NOT NULL,
    "waitForAnswer" BOOLEAN, "isError" BOOLEAN, "metadata" TEXT, "tags" TEXT, "input" TEXT,
    "output" TEXT, "createdAt" TEXT, "start" TEXT, "end" TEXT, "generation" TEXT,
    "showInput" TEXT, "defaultOpen" BOOLEAN, "autoCollapse" BOOLEAN, "language" TEXT,
    "icon" TEXT, "indent" INT,
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
CREATE TABLE IF NOT EXISTS elements (
    "id" TEXT PRIMARY KEY, "threadId" TEXT, "type" TEXT, "url" TEXT, "chainlitKey" TEXT,
    "name" TEXT NOT NULL, "display" TEXT, "objectKey" TEXT, "size" TEXT, "page" INT,
    "language" TEXT, "forId" TEXT, "mime" TEXT, "props" TEXT, "autoPlay" BOOLEAN,
    "playerConfig" TEXT,
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
CREATE TABLE IF NOT EXISTS feedbacks (
    "id" TEXT PRIMARY KEY, "forId" TEXT NOT NULL, "threadId" TEXT NOT NULL, "value" INT NOT NULL,
    "comment" TEXT,
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
"""


class ChatDbError(ErnieChatError, RuntimeError):
    """The saved-chats database cannot be used; the file is left as it was."""


def prepare_db(path: Path) -> None:
    """Create the tables if needed; refuse a file that is not a usable SQLite database."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with sqlite3.connect(path) as db:
            db.executescript(SCHEMA)
            db.execute("SELECT count(*) FROM steps").fetchone()
    except sqlite3.DatabaseError as exc:
        # Never overwrite it: the saved chats may still be recoverable.
        raise ChatDbError(
            f"ERNIE_CHAT_DB={path} is not a usable SQLite database ({exc}). It was left "
            "untouched: move it away (or restore a backup) and start again to create a new one."
        ) from exc


def data_layer_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path.resolve()}"
