"""Saved chats, switched on by ERNIE_CHAT_DB: a SQLite file, or a PostgreSQL database.

Chainlit shows its history sidebar only with a data layer AND authentication.
Its SQLAlchemy data layer writes into tables it does not create, and it only
logs a warning when a write fails, so the tables are created (and checked) here
before any worker starts: the documented schema lacks the ``autoCollapse``
(and other newer StepDict) columns, and without them every step insert fails
with only a warning (docs/notes.md, "Chainlit 2.12").  Steps are indexed by time for
the admin page's sums per day (app/pages/admin_figures.py).

SQLite is the embedded default: one file, one machine.  Several app workers (or
machines) share a PostgreSQL database instead (``postgresql://user:pw@host/db``);
SQLite takes concurrent writers only one at a time.  So that the workers of one machine
take turns rather than fail, the data layer's SQLite connections (``engine_options``,
``SQLITE_PRAGMAS``) commit each statement on its own, wait up to a minute for the write
lock, and sync the write-ahead log only at checkpoints: with the defaults (a 5 s wait)
a write that waited longer failed, and Chainlit drops a step or message it cannot write
with only a warning (docs/performance.md, "Saved chats on SQLite").

The app's own tables: ``shares``, the read-only links to chats (app/pages/share_links.py), and
the search's index (app/kept/search_index.py): ``search_texts``, each chat's title and messages
folded as the search compares them, under a trigram index (SQLite's FTS5 table
``search_trigrams``, kept by triggers; PostgreSQL's pg_trgm), and ``search_state``, the
version of the fold the texts were written with.  Steps are indexed by chat too (a chat's
last message orders the list) and chats by user. ``usage_records`` and ``audit_records``: the
replies' token counts and errors, and who signed in, shared or opened the admin page
(server/chat_records.py), which every worker of every machine writes, so that the admin
page's figures are everyone's.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from server.errors import ErnieChatError
from server.private_files import FILE_MODE, tighten

LOG = logging.getLogger(__name__)
# The app's usage and audit records (server/chat_records.py), in SQLite's types.
RECORDS = """
CREATE TABLE IF NOT EXISTS usage_records (
    "id" INTEGER PRIMARY KEY, "at" TEXT NOT NULL, "name" TEXT NOT NULL, "prompt_tokens" INT,
    "reply_tokens" INT, "ttft_s" REAL, "tokens_per_s" REAL, "finish_reason" TEXT, "error" TEXT);
CREATE INDEX IF NOT EXISTS usage_by_time ON usage_records ("at");
CREATE INDEX IF NOT EXISTS usage_by_name ON usage_records ("name");
CREATE TABLE IF NOT EXISTS audit_records (
    "id" INTEGER PRIMARY KEY, "at" TEXT NOT NULL, "action" TEXT NOT NULL, "name" TEXT NOT NULL,
    "address" TEXT NOT NULL, "detail" TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audit_by_time ON audit_records ("at");
CREATE INDEX IF NOT EXISTS audit_by_name ON audit_records ("name");
"""


def postgres_records() -> str:
    """RECORDS in PostgreSQL's types."""
    return (RECORDS.replace('"id" INTEGER PRIMARY KEY', '"id" BIGSERIAL PRIMARY KEY')
            .replace(" REAL", " DOUBLE PRECISION"))


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
CREATE INDEX IF NOT EXISTS steps_by_time ON steps ("createdAt");
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
CREATE TABLE IF NOT EXISTS shares (
    "token" TEXT PRIMARY KEY, "threadId" TEXT NOT NULL UNIQUE, "userIdentifier" TEXT NOT NULL,
    "origin" TEXT NOT NULL, "createdAt" TEXT,
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS steps_by_thread ON steps ("threadId", "createdAt");
CREATE INDEX IF NOT EXISTS threads_by_user ON threads ("userId");
CREATE TABLE IF NOT EXISTS search_texts (
    "n" INTEGER PRIMARY KEY, "threadId" TEXT NOT NULL, "part" TEXT NOT NULL,
    "folded" TEXT NOT NULL, UNIQUE ("threadId", "part"),
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS search_texts_by_part ON search_texts ("part");
CREATE VIRTUAL TABLE IF NOT EXISTS search_trigrams USING fts5(
    "folded", content='search_texts', content_rowid='n', tokenize='trigram case_sensitive 1');
CREATE TRIGGER IF NOT EXISTS search_text_added AFTER INSERT ON search_texts BEGIN
    INSERT INTO search_trigrams (rowid, "folded") VALUES (new."n", new."folded"); END;
CREATE TRIGGER IF NOT EXISTS search_text_removed AFTER DELETE ON search_texts BEGIN
    INSERT INTO search_trigrams (search_trigrams, rowid, "folded")
    VALUES ('delete', old."n", old."folded"); END;
CREATE TRIGGER IF NOT EXISTS search_text_changed AFTER UPDATE ON search_texts BEGIN
    INSERT INTO search_trigrams (search_trigrams, rowid, "folded")
    VALUES ('delete', old."n", old."folded");
    INSERT INTO search_trigrams (rowid, "folded") VALUES (new."n", new."folded"); END;
CREATE TABLE IF NOT EXISTS search_state ("version" INTEGER NOT NULL);
""" + RECORDS


# Chainlit 2.12's step, thread and element dicts, as PostgreSQL columns (UUIDs, JSONB).
POSTGRES_SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    "id" UUID PRIMARY KEY, "identifier" TEXT NOT NULL UNIQUE, "metadata" JSONB NOT NULL,
    "createdAt" TEXT);
CREATE TABLE IF NOT EXISTS threads (
    "id" UUID PRIMARY KEY, "createdAt" TEXT, "name" TEXT, "userId" UUID, "userIdentifier" TEXT,
    "tags" TEXT[], "metadata" JSONB,
    FOREIGN KEY ("userId") REFERENCES users("id") ON DELETE CASCADE);
CREATE TABLE IF NOT EXISTS steps (
    "id" UUID PRIMARY KEY, "name" TEXT NOT NULL, "type" TEXT NOT NULL, "threadId" UUID NOT NULL,
    "parentId" UUID, "streaming" BOOLEAN NOT NULL, "waitForAnswer" BOOLEAN, "isError" BOOLEAN,
    "metadata" JSONB, "tags" TEXT[], "input" TEXT, "output" TEXT, "createdAt" TEXT,
    "command" TEXT, "modes" JSONB, "start" TEXT, "end" TEXT, "generation" JSONB,
    "showInput" TEXT, "language" TEXT, "indent" INT, "defaultOpen" BOOLEAN,
    "autoCollapse" BOOLEAN,
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS steps_by_time ON steps ("createdAt");
CREATE TABLE IF NOT EXISTS elements (
    "id" UUID PRIMARY KEY, "threadId" UUID, "type" TEXT, "url" TEXT, "chainlitKey" TEXT,
    "name" TEXT NOT NULL, "display" TEXT, "objectKey" TEXT, "size" TEXT, "page" INT,
    "autoPlay" BOOLEAN, "playerConfig" JSONB, "language" TEXT, "forId" UUID, "mime" TEXT,
    "props" JSONB,
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
CREATE TABLE IF NOT EXISTS feedbacks (
    "id" UUID PRIMARY KEY, "forId" UUID NOT NULL, "threadId" UUID NOT NULL, "value" INT NOT NULL,
    "comment" TEXT,
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
CREATE TABLE IF NOT EXISTS shares (
    "token" TEXT PRIMARY KEY, "threadId" UUID NOT NULL UNIQUE, "userIdentifier" TEXT NOT NULL,
    "origin" TEXT NOT NULL, "createdAt" TEXT,
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS steps_by_thread ON steps ("threadId", "createdAt");
CREATE INDEX IF NOT EXISTS threads_by_user ON threads ("userId");
CREATE TABLE IF NOT EXISTS search_texts (
    "threadId" UUID NOT NULL, "part" TEXT NOT NULL, "folded" TEXT NOT NULL,
    PRIMARY KEY ("threadId", "part"),
    FOREIGN KEY ("threadId") REFERENCES threads("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS search_texts_by_part ON search_texts ("part");
CREATE TABLE IF NOT EXISTS search_state ("version" INTEGER NOT NULL);
""" + postgres_records()
# The trigram index of the search texts: pg_trgm ships with PostgreSQL (Debian's
# postgresql-NN package, "contrib" elsewhere) and is a trusted extension from PostgreSQL 13
# (a database's owner may create it).  Without it the search reads every text of the user.
POSTGRES_TRIGRAMS = """
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX IF NOT EXISTS search_texts_trigrams ON search_texts USING gin ("folded" gin_trgm_ops);
"""
# Of the search's fold and of what it searches (app/kept/search_index.py): a database whose
# texts were written with another is indexed again at start-up.
SEARCH_INDEX_VERSION = 1
SCHEMA_LOCK = 0x45524E49  # any fixed number: the advisory lock the schema is created under
POSTGRES_SCHEMES = ("postgresql://", "postgres://", "postgresql+asyncpg://")
# Connections each worker may hold: Chainlit's default (5 + 10) ran out at ~10 chats
# (Chainlit issue #2111); every write opens a session of its own.
POOL_SIZE, POOL_OVERFLOW = 20, 40
# A writer waits this long for another worker's write to end before it gives up.
SQLITE_BUSY_TIMEOUT_S = 60.0
# Per connection. NORMAL: a commit in WAL mode no longer waits for the disk; a power cut
# may lose the last commits, never the database.
SQLITE_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL")


class ChatDbError(ErnieChatError, RuntimeError):
    """The saved-chats database cannot be used; the file is left as it was."""


def is_postgres(target: str) -> bool:
    return str(target).startswith(POSTGRES_SCHEMES)


def without_password(url: str) -> str:
    """The URL as messages may show it: never the password."""
    head, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{head}{sep}{user}:***@{host}" if ":" in credentials else url


def prepare_db(target) -> None:
    """Create the tables if needed; refuse a database that cannot be used, with the reason."""
    if is_postgres(str(target)):
        prepare_postgres(str(target))
    else:
        prepare_sqlite(Path(target))


def prepare_postgres(url: str, timeout_s: float = 10.0) -> None:
    """Connect, create the tables, and check the columns Chainlit writes exist.

    Run in a thread of its own: the app calls this while its event loop may run.
    """
    import asyncio
    import threading

    import asyncpg

    async def create() -> None:
        db = await asyncpg.connect(plain_postgres_url(url), timeout=timeout_s)
        try:
            # Workers start together, and two CREATE TABLE IF NOT EXISTS of one table at
            # once can still collide in PostgreSQL's catalog: one at a time.
            await db.execute(f"SELECT pg_advisory_lock({SCHEMA_LOCK})")
            await db.execute(POSTGRES_SCHEMA)
            try:
                await db.execute(POSTGRES_TRIGRAMS)
            except asyncpg.PostgresError as exc:
                LOG.warning("The search has no trigram index, so it reads every text of the "
                            "user: %s (pg_trgm, PostgreSQL's contrib extension).", exc)
            await db.fetch('SELECT "autoCollapse", "defaultOpen", "modes", "command" FROM steps LIMIT 0')
        finally:
            await db.close()

    failure: list[BaseException] = []
    worker = threading.Thread(target=lambda: _catch(lambda: asyncio.run(create()), failure))
    worker.start()
    worker.join()
    if failure:
        exc = failure[0]
        raise ChatDbError(
            f"ERNIE_CHAT_DB={without_password(url)}: PostgreSQL cannot be used "
            f"({type(exc).__name__}: {exc}). Check that the server runs and that the host, "
            "port, database, user and password in the URL are right.") from exc


def _catch(call, failures: list) -> None:
    try:
        call()
    except Exception as exc:  # reported in the caller's thread, as ChatDbError
        failures.append(exc)


def plain_postgres_url(url: str) -> str:
    """What asyncpg connects to: the URL without SQLAlchemy's driver suffix."""
    return "postgresql://" + url.partition("://")[2]


def prepare_sqlite(path: Path) -> None:
    """Create the tables if needed; refuse a file that is not a usable SQLite database."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        # SQLite gives the write-ahead log and its index the database file's mode.
        path.touch(mode=FILE_MODE)
    tighten(path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")))
    try:
        with sqlite3.connect(path) as db:
            # Several workers may write at once: with a write-ahead log readers never wait.
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            db.execute("SELECT count(*) FROM steps").fetchone()
    except sqlite3.DatabaseError as exc:
        # Never overwrite it: the saved chats may still be recoverable.
        raise ChatDbError(
            f"ERNIE_CHAT_DB={path} is not a usable SQLite database ({exc}). It was left "
            "untouched: move it away (or restore a backup) and start again to create a new one."
        ) from exc


def search_index_to_build(target) -> bool:
    """Whether the search's index lacks chats: the database has some, and its texts were not
    written with this version's fold (none were, before the index)."""
    query = ('SELECT (SELECT max("version") FROM search_state) AS version, '
             'EXISTS (SELECT 1 FROM threads) AS chats')
    if is_postgres(str(target)):
        import asyncio
        import threading

        import asyncpg

        async def read():
            db = await asyncpg.connect(plain_postgres_url(str(target)), timeout=10)
            try:
                return tuple(await db.fetchrow(query))
            finally:
                await db.close()
        found: list = []  # or why it could not be read: then the build says so
        worker = threading.Thread(target=lambda: _catch(lambda: found.append(asyncio.run(read())), found))
        worker.start()
        worker.join()
    else:
        with sqlite3.connect(target) as db:
            found = [tuple(db.execute(query).fetchone())]
    if not isinstance(found[0], tuple):
        return True
    version, chats = found[0]
    return bool(chats) and version != SEARCH_INDEX_VERSION


def data_layer_url(target) -> str:
    """The SQLAlchemy URL of Chainlit's data layer for ERNIE_CHAT_DB."""
    if is_postgres(str(target)):
        return "postgresql+asyncpg://" + str(target).partition("://")[2]
    return f"sqlite+aiosqlite:///{Path(target).resolve()}"


def engine_options(target) -> dict:
    """SQLAlchemy's create_async_engine options for the data layer of ERNIE_CHAT_DB.

    SQLite: AUTOCOMMIT, so that no session of Chainlit's holds a transaction, and the
    file's write lock, across its awaits: the slowest writes under 8 workers took a
    third to a half as long (benchmarks/saved_chat_writes.py).  With nothing left to roll
    back, a connection goes back to the pool without a rollback: that rollback, cut short
    when a page closes or Stop cancels the task saving a step, logged an error each time
    under load."""
    if is_postgres(str(target)):
        return {"pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}
    return {"isolation_level": "AUTOCOMMIT", "connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S},
            "pool_reset_on_return": None}
