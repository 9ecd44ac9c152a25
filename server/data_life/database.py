"""One way to query the chat database and the login store, SQLite or PostgreSQL.

Statements are written once, with PostgreSQL's numbered parameters (``$1``); SQLite takes them
as ``?1``.  Rows come back as dicts of plain values: PostgreSQL's UUIDs as text, its JSON as the
text SQLite keeps too.  A command runs one ``asyncio.run``; a SQLite file is read and written on
that thread (a command has nothing else to do meanwhile).
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Optional
from urllib.parse import unquote, urlsplit, urlunsplit

from server.chat_db import plain_postgres_url, without_password

from server.data_life import DataLifeError

BUSY_TIMEOUT_S = 60.0  # as the app's own writers wait (server/chat_db.py)
_NUMBERED = re.compile(r"\$(\d+)")


class Database:
    """``fetch`` and ``execute`` over one connection; ``transaction`` groups them."""

    kind: str  # "sqlite" or "postgresql"
    where: str  # for messages

    async def fetch(self, query: str, *args) -> list[dict]: ...

    async def execute(self, query: str, *args) -> int:
        """Rows changed."""

    def transaction(self): ...

    async def tables(self) -> list[str]: ...

    async def close(self) -> None: ...


def plain(value):
    return str(value) if isinstance(value, uuid.UUID) else value


class SqliteDatabase(Database):
    kind = "sqlite"

    def __init__(self, path: Path):
        self.where = str(path)
        if not Path(path).is_file():  # sqlite3 would make an empty one
            raise DataLifeError(f"No SQLite database at {path}: check ERNIE_CHAT_DB and "
                                "ERNIE_AUTH_DB (run the command with the settings the stack uses).")
        try:
            # isolation_level=None: the transactions are the ones written out.
            self.db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self.db.row_factory = sqlite3.Row
        except sqlite3.Error as exc:
            raise DataLifeError(f"{path} cannot be opened as a SQLite database ({exc}).") from exc

    async def fetch(self, query: str, *args) -> list[dict]:
        return [dict(row) for row in self._run(query, args)]

    async def execute(self, query: str, *args) -> int:
        return self._run(query, args).rowcount

    def _run(self, query: str, args: tuple) -> sqlite3.Cursor:
        try:
            return self.db.execute(_NUMBERED.sub(r"?\1", query), args)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise DataLifeError(f"{self.where} stayed locked by another writer for "
                                    f"{BUSY_TIMEOUT_S:.0f} s ({exc}); nothing was changed. Try again.") from exc
            raise DataLifeError(f"{self.where} cannot be used ({exc}).") from exc
        except sqlite3.DatabaseError as exc:
            raise DataLifeError(f"{self.where} is not a usable SQLite database ({exc}); it was left "
                                "as it is. Restore a backup of it (`ernie-chat restore`).") from exc

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        self.db.execute("BEGIN IMMEDIATE")  # the write lock at once: the app's writers wait
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    async def tables(self) -> list[str]:
        return [row["name"] for row in await self.fetch(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name")]

    async def close(self) -> None:
        self.db.close()


class PostgresDatabase(Database):
    kind = "postgresql"

    def __init__(self, url: str, connection):
        self.where, self.db = without_password(url), connection

    @classmethod
    async def connect(cls, url: str) -> "PostgresDatabase":
        import asyncpg
        try:
            return cls(url, await asyncpg.connect(plain_postgres_url(url), timeout=10))
        except (OSError, asyncpg.PostgresError) as exc:
            raise DataLifeError(
                f"ERNIE_CHAT_DB={without_password(url)}: PostgreSQL cannot be reached "
                f"({type(exc).__name__}: {exc}). Check that it runs and that the URL is right."
            ) from exc

    async def fetch(self, query: str, *args) -> list[dict]:
        return [{key: plain(value) for key, value in row.items()}
                for row in await self.db.fetch(query, *args)]

    async def execute(self, query: str, *args) -> int:
        status = await self.db.execute(query, *args)  # "DELETE 3"
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        async with self.db.transaction():
            yield

    async def tables(self) -> list[str]:
        return [row["table_name"] for row in await self.fetch(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = "
            "current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name")]

    async def close(self) -> None:
        await self.db.close()


async def open_chat_db(chat_db: str, postgres: bool) -> Database:
    if postgres:
        return await PostgresDatabase.connect(chat_db)
    return SqliteDatabase(Path(chat_db))


async def count_rows(db: Database, tables: Optional[list[str]] = None) -> dict[str, int]:
    """Rows of each table (every table of the database unless named)."""
    names = tables if tables is not None else await db.tables()
    return {name: (await db.fetch(f'SELECT count(*) AS n FROM "{name}"'))[0]["n"] for name in names}


# --- pg_dump and pg_restore ---------------------------------------------------------------------

def pg_connection(url: str) -> tuple[str, dict]:
    """(the URL for a PostgreSQL tool, without its password; the environment that carries the
    password): never a secret on a command line, where `ps` shows it."""
    parts = urlsplit(plain_postgres_url(url))
    env = {"PGPASSWORD": unquote(parts.password)} if parts.password else {}
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    netloc = (f"{parts.username}@" if parts.username else "") + host + (
        f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")), env


def pg_tool(name: str) -> str:
    """pg_dump or pg_restore: on PATH, else the newest of Debian's PostgreSQL packages."""
    import glob
    import shutil
    found = shutil.which(name) or (sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [None])[-1]
    if found is None:
        raise DataLifeError(
            f"{name} is not installed, and a PostgreSQL chat database is backed up and restored "
            f"with it: install PostgreSQL's client tools (Debian and Ubuntu: apt-get install "
            "postgresql-client), of the server's major version or newer, and run this again.")
    return found
