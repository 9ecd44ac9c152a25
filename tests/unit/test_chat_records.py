"""The worker's usage and audit records (app/chat_records.py) on a real SQLite chat database: queued
without waiting, written in one go; a database that cannot take them loses the rows, not the chat."""

from __future__ import annotations

import logging

from sqlalchemy import event, text

from app import chat_records
from app.kept.saved_chats import data_layer
from server import chat_db
from server.chat_records import INSERT_AUDIT, INSERT_USAGE, SIGN_IN, audit_row, usage_row


async def test_rows_are_queued_at_once_and_written_together(tmp_path):
    target = str(tmp_path / "chats.db")
    chat_db.prepare_db(target)
    layer = data_layer(target)
    writer = chat_records.Writer()
    writer.engine_of = lambda: layer.engine
    statements = []
    event.listen(layer.engine.sync_engine, "before_cursor_execute",
                 lambda *args: statements.append(args[2]))
    try:
        for n in range(40):
            writer.add(INSERT_USAGE, usage_row("bob", n, 2 * n, 0.1, 30.0, "length"))
        writer.add(INSERT_AUDIT, audit_row(SIGN_IN, "bob", "127.0.0.1", "password"))
        assert len(writer.pending) == 41 and not statements  # nothing waited for the database
        await writer.task
        assert writer.pending == [] and len(statements) == 2  # one statement per table
        async with layer.engine.connect() as db:
            usage = (await db.execute(text('SELECT count(*), sum("prompt_tokens") FROM usage_records'))).one()
            audit = (await db.execute(text('SELECT "name", "address" FROM audit_records'))).all()
        assert tuple(usage) == (40, sum(range(40))) and [tuple(a) for a in audit] == [("bob", "127.0.0.1")]
    finally:
        await layer.engine.dispose()


async def test_rows_the_database_refuses_are_logged_and_dropped(tmp_path, caplog):
    target = tmp_path / "old.db"
    target.touch()  # a database without the tables
    layer = data_layer(str(target))
    writer = chat_records.Writer()
    writer.engine_of = lambda: layer.engine
    try:
        with caplog.at_level(logging.WARNING, logger="app.chat_records"):
            writer.add(INSERT_USAGE, usage_row("bob", 1, 2))
            await writer.task
        assert writer.pending == [] and "1 usage or audit record(s) could not be written" in caplog.text
        writer.add(INSERT_USAGE, usage_row("bob", 1, 2))  # and the next ones are still tried
        assert writer.task is not None and not writer.task.done()
        await writer.task
    finally:
        await layer.engine.dispose()


def test_without_a_chat_database_nothing_is_queued():
    writer = chat_records.Writer()
    writer.add(INSERT_USAGE, usage_row("bob", 1, 2))  # no running loop needed: nothing to write
    assert writer.pending == [] and writer.task is None
