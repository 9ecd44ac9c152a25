"""server/chat_db.py against a real PostgreSQL server (started here) and a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from app.kept import saved_chats
from server import chat_db


def test_the_data_layer_url_uses_asyncpg_or_aiosqlite(tmp_path):
    assert chat_db.data_layer_url("postgresql://u:p@h:5432/d") == "postgresql+asyncpg://u:p@h:5432/d"
    assert chat_db.data_layer_url(str(tmp_path / "c.db")) == f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"


def test_a_sqlite_file_takes_readers_while_one_writes(tmp_path):
    path = tmp_path / "chats.db"
    chat_db.prepare_db(str(path))
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_the_data_layer_on_sqlite_commits_each_write_and_waits_for_the_lock(tmp_path):
    """Settings in force on the app's own connections to a real file: a write inside the data
    layer's session is in the file at once (no transaction left holding the lock), a locked
    file is waited for a minute, and commits do not wait for the disk."""
    path = tmp_path / "chats.db"
    chat_db.prepare_db(str(path))
    layer = saved_chats.data_layer(str(path))
    try:
        async with layer.async_session() as session:
            await session.begin()  # as Chainlit's execute_sql does
            pragmas = {name: (await session.execute(text(f"PRAGMA {name}"))).scalar()
                       for name in ("journal_mode", "synchronous", "busy_timeout")}
            await session.execute(text('INSERT INTO threads ("id") VALUES (:id)'), {"id": "t1"})
            with sqlite3.connect(path, timeout=0) as other:  # another worker, not waiting
                assert other.execute('SELECT "id" FROM threads').fetchall() == [("t1",)]
                other.execute('INSERT INTO threads ("id") VALUES (\'t2\')')
    finally:
        await layer.engine.dispose()
    assert pragmas == {"journal_mode": "wal", "synchronous": 1, "busy_timeout": 60_000}


async def test_a_connection_goes_back_to_the_pool_without_a_rollback(tmp_path):
    """Every statement is committed already; the rollback SQLAlchemy would add when the
    connection goes back to the pool, cancelled with the task of a closed page, logged a
    traceback each time in the H200's failover run with saved chats.  What is left is the
    session's own rollback, which the driver ignores in autocommit mode."""
    path = tmp_path / "chats.db"
    chat_db.prepare_db(str(path))
    layer = saved_chats.data_layer(str(path))

    async def one_session(thread_id: str) -> None:
        async with layer.async_session() as session:
            await session.begin()  # as Chainlit's execute_sql does
            await session.execute(text('INSERT INTO threads ("id") VALUES (:id)'), {"id": thread_id})
    try:
        await one_session("t1")  # the pool's first connection, with the dialect's own set-up
        dialect, rollbacks = layer.engine.sync_engine.dialect, []
        rollback = dialect.do_rollback
        dialect.do_rollback = lambda connection: (rollbacks.append(connection), rollback(connection))
        await one_session("t2")
    finally:
        await layer.engine.dispose()
    assert len(rollbacks) == 1, "the pool rolled back on return"
    with sqlite3.connect(path) as db:
        assert db.execute('SELECT "id" FROM threads ORDER BY "id"').fetchall() == [("t1",), ("t2",)]


def test_workers_writing_chat_steps_at_once_lose_none(tmp_path):
    """Four processes, each with 20 chats saving steps at once through the app's data layer
    (benchmarks/saved_chat_writes.py): every step is in the file."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "saved_chat_writes.py"
    done = subprocess.run([sys.executable, str(script), "--processes", "4", "--chats", "20",
                           "--steps", "5", "--runs", "1", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [run] = json.loads(done.stdout)
    assert (run["writes"], run["dropped"]) == (400, 0)


def test_the_search_index_is_built_only_where_chats_lack_it(tmp_path):
    path = str(tmp_path / "chats.db")
    chat_db.prepare_db(path)
    assert not chat_db.search_index_to_build(path)  # no chat: nothing to index
    with sqlite3.connect(path) as db:
        db.execute("""INSERT INTO threads ("id", "name") VALUES ('t1', 'a chat from before')""")
    assert chat_db.search_index_to_build(path)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO search_state (version) VALUES (?)", (chat_db.SEARCH_INDEX_VERSION - 1,))
    assert chat_db.search_index_to_build(path)  # folded by an earlier version
    with sqlite3.connect(path) as db:
        db.execute("UPDATE search_state SET version = ?", (chat_db.SEARCH_INDEX_VERSION,))
    assert not chat_db.search_index_to_build(path)
