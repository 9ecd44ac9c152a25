"""What logins leave behind, shared by every app worker and kept across restarts.

Three things: the login throttle's counts (``app/auth/login_throttle.py``), the session
tokens revoked by a logout, and the time each user was last signed out everywhere
(``ernie-chat revoke-sessions``; ``app/auth/auth_sessions.py`` checks both on every request).
Kept in memory, they would be per worker and lost on a restart: a guesser would get a
fresh count from each worker, and a logged-out token would work again.

Where: in the chat database when ERNIE_CHAT_DB is PostgreSQL (the workers and machines
already share it), else in a SQLite file of its own (ERNIE_AUTH_DB, mode 0600).  A
change of throttle counts is one transaction that locks its rows (SQLite: BEGIN
IMMEDIATE; PostgreSQL: SELECT ... FOR UPDATE), so guesses sent at once to several
workers still take their turns one after another.  Times are wall-clock seconds
(``time.time()``): the rows outlive the processes that wrote them.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol, TypeVar

from server.chat_db import is_postgres, plain_postgres_url, without_password
from server.errors import ErnieChatError

T = TypeVar("T")

# Tables of keys: the login throttle's, and the per-user limits' (app/auth/user_limits.py), each
# forgotten on its own horizon.
LOGIN_KEYS, LIMIT_KEYS = "auth_login_keys", "user_limit_keys"
KEY_TABLE = """
CREATE TABLE IF NOT EXISTS {t} (
    key TEXT PRIMARY KEY, failures REAL NOT NULL, updated REAL NOT NULL, ready_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS {t}_updated ON {t} (updated);
"""
SQLITE_SCHEMA = KEY_TABLE.format(t=LOGIN_KEYS) + KEY_TABLE.format(t=LIMIT_KEYS) + """
CREATE TABLE IF NOT EXISTS auth_revoked_tokens (digest TEXT PRIMARY KEY, until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS auth_signed_out (name TEXT PRIMARY KEY, at REAL NOT NULL);
"""
POSTGRES_SCHEMA = SQLITE_SCHEMA.replace("REAL", "DOUBLE PRECISION")
# Any fixed number other than server.chat_db's: the advisory lock the tables are made under.
SCHEMA_LOCK = 0x45524E4A
# Writers wait this long for one another (a login holds the lock for a few ms).
BUSY_TIMEOUT_S = 10.0
# A SQLite store's own threads (each with its connection): a writer waiting for the lock holds
# one, and the session check of every request must not wait behind other work, as it did on
# the event loop's default executor behind slow file reads.
SQLITE_THREADS = 4


class AuthStoreError(ErnieChatError, RuntimeError):
    """The login store cannot be used; the message says which file or database, and why."""


@dataclass
class KeyState:
    """One throttle key: its failed logins (decayed as of ``updated``) and its next free slot.
    A limit key uses ``ready_at`` alone, and ``updated`` for when it may be forgotten."""

    failures: float = 0.0
    updated: float = 0.0
    ready_at: float = 0.0


# Called inside the transaction with the stored states of the asked keys (missing ones
# absent); it changes the dict in place (a key it removes is deleted) and returns the answer.
KeyChange = Callable[[dict[str, KeyState]], T]


class AuthStore(Protocol):
    where: str  # for messages: the file, or the database without its password

    async def update_keys(self, keys: list[str], change: KeyChange, forget_before: float,
                          table: str = LOGIN_KEYS) -> T:
        """Run ``change`` on ``keys`` of ``table`` atomically; its rows idle since
        ``forget_before`` go too."""

    async def revoke_token(self, digest: str, until: float, now: float) -> None:
        """Refuse the token with this digest until it expires anyway."""

    async def sign_out(self, name: str, at: float) -> None:
        """Refuse every token of ``name`` issued at or before ``at``."""

    async def session_marks(self, digest: str, name: str) -> tuple[bool, Optional[float]]:
        """(Is this token revoked?, when was its user last signed out everywhere?)"""

    async def close(self) -> None: ...


def open_store(chat_db: Optional[str], auth_db: Path) -> AuthStore:
    """The store for these settings (ERNIE_CHAT_DB, ERNIE_AUTH_DB)."""
    if chat_db is not None and is_postgres(chat_db):
        return PostgresStore(chat_db)
    return SqliteStore(auth_db)


class SqliteStore:
    """One file; each call runs on one of the store's threads, each with its own connection."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.where = str(self.path)
        self._local = threading.local()
        self._threads = ThreadPoolExecutor(SQLITE_THREADS, thread_name_prefix="auth-store")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Made private before SQLite makes it with the umask's mode; its -wal and -shm
            # files take the database file's mode.
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            db = self._db()
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SQLITE_SCHEMA)
        except (OSError, sqlite3.DatabaseError) as exc:
            raise AuthStoreError(
                f"ERNIE_AUTH_DB={self.path} cannot be used for the login store ({exc}). It holds "
                "only login counts and sign-outs: move it away and start again to make a new one."
            ) from exc

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            # isolation_level=None: the transactions below are the ones written out.
            db = self._local.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S,
                                                  isolation_level=None)
        return db

    async def _in_thread(self, work: Callable[..., T], *args) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, work, *args)

    def _transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        db = self._db()
        # IMMEDIATE: the write lock from the first read, so no two workers read the same
        # counts and both write them back.
        db.execute("BEGIN IMMEDIATE")
        try:
            result = work(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return result

    async def update_keys(self, keys: list[str], change: KeyChange, forget_before: float,
                          table: str = LOGIN_KEYS) -> T:
        table = _key_table(table)

        def work(db: sqlite3.Connection) -> T:
            marks = ",".join("?" * len(keys))
            rows = db.execute(f"SELECT key, failures, updated, ready_at FROM {table} "
                              f"WHERE key IN ({marks})", keys).fetchall()
            states = {key: KeyState(*values) for key, *values in rows}
            result = change(states)
            kept, gone = _changed_rows(keys, states)
            db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?, ?)", kept)
            db.executemany(f"DELETE FROM {table} WHERE key = ?", gone)
            db.execute(f"DELETE FROM {table} WHERE updated < ?", (forget_before,))
            return result
        return await self._in_thread(self._transaction, work)

    async def revoke_token(self, digest: str, until: float, now: float) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute("INSERT OR REPLACE INTO auth_revoked_tokens VALUES (?, ?)", (digest, until))
            db.execute("DELETE FROM auth_revoked_tokens WHERE until < ?", (now,))
        await self._in_thread(self._transaction, work)

    async def sign_out(self, name: str, at: float) -> None:
        await self._in_thread(self._transaction, lambda db: db.execute(
            "INSERT OR REPLACE INTO auth_signed_out VALUES (?, ?)", (name, at)))

    async def session_marks(self, digest: str, name: str) -> tuple[bool, Optional[float]]:
        def read() -> tuple[bool, Optional[float]]:
            revoked, at = self._db().execute(
                "SELECT EXISTS (SELECT 1 FROM auth_revoked_tokens WHERE digest = ?), "
                "(SELECT at FROM auth_signed_out WHERE name = ?)", (digest, name)).fetchone()
            return bool(revoked), at
        return await self._in_thread(read)

    async def close(self) -> None:
        """The store's threads end, and each one's connection with it."""
        self._threads.shutdown(wait=False)


class PostgresStore:
    """Tables in the chat database, through a small asyncpg pool made on first use."""

    def __init__(self, url: str):
        self.url = url
        self.where = f"the chat database {without_password(url)}"
        self._pool = None
        self._opening = asyncio.Lock()

    async def _connection_pool(self):
        import asyncpg

        async with self._opening:
            if self._pool is None:
                try:
                    pool = await asyncpg.create_pool(plain_postgres_url(self.url), min_size=1,
                                                     max_size=4, timeout=BUSY_TIMEOUT_S)
                    async with pool.acquire() as db, db.transaction():
                        await db.execute(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")
                        await db.execute(POSTGRES_SCHEMA)
                except (OSError, asyncpg.PostgresError) as exc:
                    raise AuthStoreError(
                        f"ERNIE_CHAT_DB={without_password(self.url)}: the login store in "
                        f"PostgreSQL cannot be used ({type(exc).__name__}: {exc}).") from exc
                self._pool = pool
        return self._pool

    async def update_keys(self, keys: list[str], change: KeyChange, forget_before: float,
                          table: str = LOGIN_KEYS) -> T:
        table = _key_table(table)
        keys = sorted(keys)  # every transaction locks in the same order: no deadlock
        pool = await self._connection_pool()
        async with pool.acquire() as db:
            async with db.transaction():
                # FOR UPDATE locks only rows that exist: make them first, so that two first
                # attempts on a new key also wait for each other.
                await db.execute(f"INSERT INTO {table} SELECT unnest($1::text[]), 0, 0, 0 "
                                 "ON CONFLICT DO NOTHING", keys)
                rows = await db.fetch(f"SELECT key, failures, updated, ready_at FROM {table} "
                                      "WHERE key = ANY($1) ORDER BY key FOR UPDATE", keys)
                states = {row["key"]: KeyState(row["failures"], row["updated"], row["ready_at"])
                          for row in rows if row["updated"] > 0}
                result = change(states)
                await _write_back_async(db, table, keys, states)
            # Apart, and skipping rows a login holds: a delete that waited for them could
            # deadlock with it.
            await db.execute(f"DELETE FROM {table} WHERE key IN (SELECT key FROM {table} "
                             "WHERE updated < $1 FOR UPDATE SKIP LOCKED)", forget_before)
        return result

    async def revoke_token(self, digest: str, until: float, now: float) -> None:
        pool = await self._connection_pool()
        async with pool.acquire() as db, db.transaction():
            await db.execute("INSERT INTO auth_revoked_tokens VALUES ($1, $2) ON CONFLICT (digest) "
                             "DO UPDATE SET until = EXCLUDED.until", digest, until)
            await db.execute("DELETE FROM auth_revoked_tokens WHERE until < $1", now)

    async def sign_out(self, name: str, at: float) -> None:
        pool = await self._connection_pool()
        await pool.execute("INSERT INTO auth_signed_out VALUES ($1, $2) ON CONFLICT (name) "
                           "DO UPDATE SET at = EXCLUDED.at", name, at)

    async def session_marks(self, digest: str, name: str) -> tuple[bool, Optional[float]]:
        pool = await self._connection_pool()
        row = await pool.fetchrow(
            "SELECT EXISTS (SELECT 1 FROM auth_revoked_tokens WHERE digest = $1) AS revoked, "
            "(SELECT at FROM auth_signed_out WHERE name = $2) AS at", digest, name)
        return row["revoked"], row["at"]

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def _changed_rows(keys: list[str], states: dict[str, KeyState]) -> tuple[list[tuple], list[tuple]]:
    """(rows to write, keys to delete) after a change."""
    kept = [(key, s.failures, s.updated, s.ready_at) for key, s in states.items()]
    gone = [(key,) for key in keys if key not in states]
    return kept, gone


def _key_table(table: str) -> str:
    """One of the key tables (the name goes into SQL text)."""
    if table not in (LOGIN_KEYS, LIMIT_KEYS):
        raise ValueError(f"no key table {table!r}")
    return table


async def _write_back_async(db, table: str, keys: list[str], states: dict[str, KeyState]) -> None:
    kept, gone = _changed_rows(keys, states)
    await db.executemany(f"INSERT INTO {table} VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO "
                         "UPDATE SET failures = EXCLUDED.failures, updated = EXCLUDED.updated, "
                         "ready_at = EXCLUDED.ready_at", kept)
    await db.executemany(f"DELETE FROM {table} WHERE key = $1", gone)
