"""server/chat_db.py against the run's real PostgreSQL server (a database of this module's own)."""

from __future__ import annotations

import threading

import pytest

from server import chat_db
from tests.support import postgres


def columns(url: str, table: str) -> set[str]:
    return {r["column_name"] for r in postgres.fetch(
        url, "SELECT column_name FROM information_schema.columns WHERE table_name = $1", table)}


def test_workers_that_prepare_the_database_at_once_all_succeed(database):
    failures = []

    def prepare():
        try:
            chat_db.prepare_db(database)
        except chat_db.ChatDbError as exc:
            failures.append(exc)
    workers = [threading.Thread(target=prepare) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []
    # The columns Chainlit 2.12 writes, which its documented schema lacks.
    assert {"autoCollapse", "defaultOpen", "modes", "command"} <= columns(database, "steps")
    chat_db.prepare_db(database)                      # and again: nothing to do, no error


def test_a_database_that_does_not_exist_is_named_without_the_password(database):
    wrong = database.replace("@", ":hunter2@").rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(chat_db.ChatDbError) as info:
        chat_db.prepare_db(wrong)
    assert "no_such_db" in str(info.value) and "hunter2" not in str(info.value)
