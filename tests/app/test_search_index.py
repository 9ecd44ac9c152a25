"""The search's index (app/kept/search_index.py) on SQLite and on PostgreSQL: it follows a chat's
messages as they are edited and deleted, its title as it is renamed, the chat as it is deleted;
a database from before the index gets it at its first start.  Written and searched through the
app's data layer, as the chat writes and the sidebar searches; no engine needed."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from app.kept import search_index
from app.kept.chat_search import SearchingLayer
from app.kept.saved_chats import data_layer
from server import chat_db
from server.paths import ROOT
from server.stack.supervisor import Stack
from tests.support import postgres
from tests.support.data_life import chat_settings
from tests.support.search import chat_written, open_searching_layer, titles_found, write_chats

# What a database had before the index: none of these.
BEFORE_THE_INDEX = ("DROP TABLE IF EXISTS search_trigrams", "DROP TABLE IF EXISTS search_texts",
                    "DROP TABLE IF EXISTS search_state", "DROP INDEX IF EXISTS steps_by_thread",
                    "DROP INDEX IF EXISTS threads_by_user")


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "chats.db")
    return request.getfixturevalue("postgres_server").new_database()


def run_sql(target: str, statement: str) -> list:
    if chat_db.is_postgres(target):
        return [tuple(row) for row in postgres.fetch(target, statement)]
    with sqlite3.connect(target) as db:
        return db.execute(statement).fetchall()


def test_an_edited_or_deleted_message_renamed_or_deleted_chat_is_no_longer_found(target):
    async def run() -> None:
        layer, user = await open_searching_layer(target)
        try:
            asked, reply = await chat_written(layer, user, "Garden", "my tomatoes wilt", "Water them at dawn.")
            other = await chat_written(layer, user, "Kitchen", "tomatoes in a soup?", "Yes, peeled.")
            assert await titles_found(layer, user, "TOMATOES dawn") == {"Garden"}
            assert await titles_found(layer, user, "tomatoes") == {"Garden", "Kitchen"}
            # An edited message, as Chainlit saves an edit: the step again, with its new text.
            await layer.update_step({**asked, "output": "my cucumbers wilt"})
            assert await titles_found(layer, user, "tomatoes") == {"Kitchen"}
            assert await titles_found(layer, user, "cucumbers") == {"Garden"}
            await layer.delete_step(reply["id"])
            assert await titles_found(layer, user, "dawn") == set()
            assert await titles_found(layer, user, "garden cucumbers") == {"Garden"}
            await layer.update_thread(asked["threadId"], name="Vegetables")
            assert await titles_found(layer, user, "garden") == set()
            assert await titles_found(layer, user, "vegetables wilt") == {"Vegetables"}
            await layer.delete_thread(asked["threadId"])
            assert await titles_found(layer, user, "wilt") == set()
            assert await titles_found(layer, user, "soup") == {"Kitchen"}
        finally:
            await layer.engine.dispose()
    asyncio.run(run())
    chats = {str(row[0]) for row in run_sql(target, 'SELECT "threadId" FROM search_texts')}
    assert len(chats) == 1  # the deleted chat left no row; Kitchen's are there


def made_before_the_index(target: str) -> dict[str, str]:
    """alice's and bob's chats in a database as it was before the index; their ids by title."""
    chat_db.prepare_db(target)
    ids = asyncio.run(write_chats(target))  # without the index: Chainlit's own data layer
    for statement in BEFORE_THE_INDEX:
        run_sql(target, statement)
    return ids


def test_up_indexes_a_database_from_before_the_index_before_its_workers_start(target, tmp_path):
    made_before_the_index(target)
    settings = chat_settings(tmp_path, target)
    Stack(settings, root=ROOT).index_search()
    assert not chat_db.search_index_to_build(target)
    log = (settings.log_file.parent / "search-index.log").read_text()
    assert "search index: 15 texts indexed" in log
    assert run_sql(target, "SELECT count(*) FROM search_texts") == [(15,)]


def test_a_database_from_before_the_index_gets_it_at_its_first_start(target, monkeypatch):
    ids = made_before_the_index(target)
    chat_db.prepare_db(target)  # as the app starts: the tables, empty
    assert chat_db.search_index_to_build(target)
    monkeypatch.setattr(search_index, "BATCH", 3)
    monkeypatch.setattr(search_index, "PROGRESS_S", 0.0)
    said: list[str] = []
    assert search_index.build(target, said.append) == 5 + 10  # the titles, the messages and replies
    assert said[0] == "search index: 3 of 10 messages indexed (0 s)" and said[-1].startswith("search index: built")
    assert search_index.build(target, said.append) == 0  # built once

    async def found(user: str, query: str) -> set[str]:
        layer = data_layer(target, SearchingLayer)
        try:
            account = await layer.get_user(user)
            return await titles_found(layer, account.id, query)
        finally:
            await layer.engine.dispose()
    assert asyncio.run(found("alice", "KYOTO ernie")) == {"Trip planning"}
    assert asyncio.run(found("alice", "分支 深度")) == {"机器学习"}
    assert asyncio.run(found("bob", "zeppelin")) == {"Bob's secret"}
    assert asyncio.run(found("alice", "zeppelin")) == set()
    assert ids["Bob's secret"] in {str(row[0]) for row in run_sql(target, 'SELECT "threadId" FROM search_texts')}
