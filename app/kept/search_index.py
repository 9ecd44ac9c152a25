"""The search's index of saved chats: each chat's title and searched messages, folded as the
search compares them, in the app's own table ``search_texts`` under a trigram index
(the tables: server/chat_db.py).  A query reads the index, never every chat of the user.

The text is folded in Python (:func:`folded`: NFKC and case folding, which neither SQLite
nor PostgreSQL does alike), so the data layer writes a chat's row as it writes the chat
(``SearchingLayer``, app/kept/chat_search.py): a step's row from the step as it was stored,
after each write or deletion of it (a reply in flight, whose text is saved apart from the
data layer, app/kept/saved_chats.py, by its first text until Chainlit saves it whole); the
title's after each change of the chat's name.  A database from before the index, or with
texts folded by an earlier :data:`VERSION`, gets them at the first start (:func:`build`): the
supervisor runs this module before the app workers start; a worker started otherwise builds
it, the others waiting.

A word is found where it is a substring of one text of the chat (a word holds no
whitespace, so this is the same as in all the chat's texts joined by a newline).  A word of
three characters or more is looked up in the trigram index (SQLite's FTS5 ``trigram``
tokenizer, PostgreSQL's pg_trgm); a shorter one has no trigram, so each chat left is read
up to its first text that holds it.  The words are bound parameters, never SQL: a ``%`` or
``_`` is only itself.
"""

from __future__ import annotations

import sys
import time
import unicodedata
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable, Optional

from app.conversation.saved_metadata import saved_metadata, step_metadata
from app.texts import without_figures
from server import chat_db

VERSION = chat_db.SEARCH_INDEX_VERSION  # one more when folded() or searched_text() changes
TITLE = ""  # the part of a chat's title row; a step's row is the step's id
TRIGRAM = 3  # characters: a shorter word has nothing to look up in a trigram index
BATCH = 2000  # steps read and written at a time while the index is built
PROGRESS_S = 5.0
BUILD_LOCK = 0x45524E53  # the advisory lock a PostgreSQL build holds
BUILD_WAIT_S = 3600.0  # a SQLite worker waits this long for another's build

STEP = 'SELECT "threadId", "type", "metadata", "output" FROM steps WHERE "id" = :id'
NAME = 'SELECT "name" FROM threads WHERE "id" = :thread'
WRITE = ('INSERT INTO search_texts ("threadId", "part", "folded") VALUES (:thread, :part, :folded) '
         'ON CONFLICT ("threadId", "part") DO UPDATE SET "folded" = excluded."folded"')
FORGET_PART = 'DELETE FROM search_texts WHERE "part" = :part'
FORGET_CHAT = 'DELETE FROM search_texts WHERE "threadId" = :thread'
FOUND = ('SELECT t."id" FROM threads t WHERE t."userId" = :user {words} ORDER BY '
         '(SELECT max(s."createdAt") FROM steps s WHERE s."threadId" = t."id") DESC NULLS LAST')
CHATS = ('SELECT "id", "createdAt", "name", "userId", "userIdentifier", "tags", "metadata" '
         'FROM threads WHERE "id" IN ({ids})')
# One word's condition, {n} its number.  By the trigram index: a phrase of the FTS5 trigram
# tokenizer (case-sensitive) matches exactly the texts that hold it.  A word too short for
# it is looked for in the chat's texts, up to the first that holds it: short words are mostly
# common ones, found at once.
BY_TRIGRAMS = {
    "sqlite": ('AND t."id" IN (SELECT x."threadId" FROM search_trigrams JOIN search_texts x '
               'ON x."n" = search_trigrams.rowid WHERE search_trigrams MATCH :t{n})'),
    "postgresql": ('AND t."id" IN (SELECT x."threadId" FROM search_texts x '
                   'WHERE x."folded" LIKE :t{n} ESCAPE \'\\\')'),
}
BY_READING = ('AND EXISTS (SELECT 1 FROM search_texts x WHERE x."threadId" = t."id" '
              'AND {contains}(x."folded", :w{n}) > 0)')
CONTAINS = {"sqlite": "instr", "postgresql": "strpos"}
SEARCHED_TYPES = ("user_message", "assistant_message")


def folded(value: str) -> str:
    """Text as it is compared: compatibility forms (full width, ligatures) and case folded."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())


def may_be_searched(step: dict) -> bool:
    """Whether a write of ``step`` may change its row: not that of a step of another kind (a
    step's kind never changes), which is most of them."""
    return step.get("type") in SEARCHED_TYPES or "type" not in step


def searched_text(step: dict) -> Optional[str]:
    """What the search compares of a step: what the user wrote and the replies, without their
    figures lines (every reply has one); not the welcome, notices or errors, which many chats
    share."""
    reply = step.get("type") == "assistant_message" and step_metadata(step).get("kind") == "reply"
    if step.get("type") == "user_message" or reply:
        return without_figures(step.get("output") or "")
    return None


def like_pattern(word: str) -> str:
    """PostgreSQL's LIKE pattern of text holding ``word``, its wildcards escaped."""
    return "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def phrase(word: str) -> str:
    """An FTS5 query of ``word`` as a string of characters, whatever its quotes and operators."""
    return '"' + word.replace('"', '""') + '"'


def search_query(dialect: str, user_id: str, words: list[str]) -> tuple[str, dict]:
    """The statement that finds the ids of the user's chats holding every word, latest
    first, and its parameters."""
    parameters, conditions = {"user": user_id}, []
    for n, word in enumerate(dict.fromkeys(words)):
        if len(word) < TRIGRAM:
            conditions.append(BY_READING.format(contains=CONTAINS[dialect], n=n))
            parameters[f"w{n}"] = word
        else:
            conditions.append(BY_TRIGRAMS[dialect].format(n=n))
            parameters[f"t{n}"] = (phrase if dialect == "sqlite" else like_pattern)(word)
    return FOUND.format(words=" ".join(conditions)), parameters


async def found_chats(layer, user_id: str, words: list[str]) -> list[str]:
    """The ids of the user's chats holding every word, latest first."""
    query, parameters = search_query(layer.engine.dialect.name, user_id, words)
    return [row["id"] for row in await layer.execute_sql(query, parameters) or []]


async def chats(layer, ids: list[str]) -> list[dict]:
    """The chats of ``ids``, in that order, as Chainlit lists chats (without their steps)."""
    if not ids:
        return []
    names = {f"c{n}": chat_id for n, chat_id in enumerate(ids)}
    rows = await layer.execute_sql(CHATS.format(ids=", ".join(f":{name}" for name in names)), names)
    by_id = {row["id"]: {**row, "metadata": saved_metadata(row.get("metadata")), "steps": [], "elements": []}
             for row in rows or []}
    return [by_id[chat_id] for chat_id in ids if chat_id in by_id]


# --- kept up to date by the data layer ---------------------------------------------------------

async def write_step(layer, step_id: str) -> None:
    """The step's row as the step is stored now: its folded text, or none."""
    rows = await layer.execute_sql(STEP, {"id": step_id})
    text = searched_text(rows[0]) if rows else None
    if text is None:
        await layer.execute_sql(FORGET_PART, {"part": step_id})
    else:
        await layer.execute_sql(WRITE, {"thread": rows[0]["threadId"], "part": step_id,
                                        "folded": folded(text)})


async def write_title(layer, thread_id: str) -> None:
    rows = await layer.execute_sql(NAME, {"thread": thread_id})
    if rows:
        await layer.execute_sql(WRITE, {"thread": thread_id, "part": TITLE,
                                        "folded": folded(rows[0]["name"] or "")})


async def forget_chat(layer, thread_id: str) -> None:
    await layer.execute_sql(FORGET_CHAT, {"thread": thread_id})


# --- built at the first start ------------------------------------------------------------------

def _to_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # a worker's stderr is its log


def build(target: str, say: Callable[[str], None] = _to_log) -> int:
    """Index every chat of ERNIE_CHAT_DB unless it was, with this :data:`VERSION`; the texts
    written.  Run in a thread of its own: the app calls this while its event loop may run."""
    import asyncio
    import threading
    written: list[int] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            written.append(asyncio.run(_build(target, say)))
        except BaseException as exc:  # raised in the caller's thread
            failure.append(exc)
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return written[0]


async def _build(target: str, say: Callable[[str], None]) -> int:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine
    postgres = chat_db.is_postgres(target)
    options = {} if postgres else {"isolation_level": "AUTOCOMMIT",
                                   "connect_args": {"timeout": BUILD_WAIT_S}}
    engine = create_async_engine(chat_db.data_layer_url(target), **options)
    try:
        async with _alone(engine, postgres) as db:
            if (await db.execute(text('SELECT max("version") FROM search_state'))).scalar() == VERSION:
                return 0
            await db.execute(text("DELETE FROM search_texts"))
            titles = (await db.execute(text('SELECT "id", "name" FROM threads'))).mappings().all()
            rows = [{"thread": str(t["id"]), "part": TITLE, "folded": folded(t["name"] or "")}
                    for t in titles]
            if rows:
                await db.execute(text(WRITE), rows)
            written = len(rows) + await _index_steps(db, say)
            await db.execute(text("DELETE FROM search_state"))
            await db.execute(text("INSERT INTO search_state (version) VALUES (:v)"), {"v": VERSION})
            return written
    finally:
        await engine.dispose()


async def _index_steps(db, say: Callable[[str], None]) -> int:
    from sqlalchemy import text
    total = (await db.execute(text("SELECT count(*) FROM steps"))).scalar()
    started = last_said = time.monotonic()
    columns = 'SELECT "id", "threadId", "type", "metadata", "output" FROM steps'
    done, written, after = 0, 0, None
    while True:
        where = "" if after is None else 'WHERE "id" > :after'
        batch = (await db.execute(text(f'{columns} {where} ORDER BY "id" LIMIT {BATCH}'),
                                  {"after": after})).mappings().all()
        if not batch:
            break
        after, done = batch[-1]["id"], done + len(batch)
        rows = [{"thread": str(step["threadId"]), "part": str(step["id"]), "folded": folded(found)}
                for step in map(dict, batch) if (found := searched_text(step)) is not None]
        if rows:
            await db.execute(text(WRITE), rows)
        written += len(rows)
        if time.monotonic() - last_said >= PROGRESS_S:
            last_said = time.monotonic()
            say(f"search index: {done:,} of {total:,} messages indexed "
                f"({time.monotonic() - started:.0f} s)")
    if last_said > started:
        say(f"search index: built, {total:,} messages in {time.monotonic() - started:.0f} s")
    return written


@asynccontextmanager
async def _alone(engine, postgres: bool) -> AsyncIterator:
    """A connection in a transaction that no other worker's build runs beside: they wait, then
    find the index built."""
    from sqlalchemy import text
    if postgres:
        async with engine.begin() as db:
            await db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": BUILD_LOCK})
            yield db
        return
    async with engine.connect() as db:
        await db.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock, before the version is read
        try:
            yield db
        except BaseException:
            await db.exec_driver_sql("ROLLBACK")
            raise
        await db.exec_driver_sql("COMMIT")


def main() -> None:
    """``python -m app.kept.search_index ERNIE_CHAT_DB``, as the supervisor runs it before the
    app workers start: the index built if it is not, its progress on stdout."""
    written = build(sys.argv[1], lambda line: print(line, flush=True))
    print(f"search index: {written:,} texts indexed" if written else "search index: up to date")


if __name__ == "__main__":
    main()
