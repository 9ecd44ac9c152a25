"""Saved chats written while a backup runs, and every row of a database read back, for the
backup, restore, export and deletion tests (tests/app/test_data_life.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import uuid
from pathlib import Path

from server.data_life.database import open_chat_db
from server.usage_log import append_usage


def chat_settings(tmp: Path, chat_db: str, **overrides):
    """Settings of a machine whose data is all under ``tmp`` (no .env: the tests' folder)."""
    from server.settings import load_settings
    tmp.mkdir(parents=True, exist_ok=True)
    values = dict(chat_db=chat_db, users="alice:wonderland,bob:builder,carol:sweet",
                  auth_db=tmp / "auth.db", usage_log=tmp / "usage.jsonl",
                  log_file=tmp / "run" / "llm.log", live_chats_dir=tmp / "live-chats")
    return load_settings(**{**values, **overrides})


async def write_chat(layer, user_id: str, name: str, title: str, texts: list[str]) -> str:
    """One chat of ``texts`` (a message, a reply, ...) as the chat saves them; its id."""
    create_step = type(layer).create_step.__wrapped__  # without the chat's websocket context
    thread = str(uuid.uuid4())
    await layer.update_thread(thread, name=title, user_id=user_id)
    for n, text in enumerate(texts):
        at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(milliseconds=n)).isoformat()
        await create_step(layer, {"id": str(uuid.uuid4()), "name": name, "threadId": thread,
                                  "type": "user_message" if n % 2 == 0 else "assistant_message",
                                  "output": text, "metadata": {}, "streaming": False, "createdAt": at})
    return thread


def write_records(target: str, usage: list[str], audit: list[tuple[str, str]]) -> None:
    """A reply's usage record for each name of ``usage``, and an audit record for each (action,
    name) of ``audit``, as the app's workers write them (app/chat_records.py)."""
    from sqlalchemy import text

    from app.kept.saved_chats import data_layer
    from server.chat_records import INSERT_AUDIT, INSERT_USAGE, audit_row, usage_row

    async def write() -> None:
        layer = data_layer(target)
        try:
            async with layer.engine.begin() as db:
                for name in usage:
                    await db.execute(text(INSERT_USAGE), usage_row(name, 3, 4, 0.1, 50.0, "length"))
                for action, name in audit:
                    await db.execute(text(INSERT_AUDIT), audit_row(action, name, "10.1.2.3"))
        finally:
            await layer.engine.dispose()
    asyncio.run(write())


class ChatWriter:
    """A user who chats without pause in a thread of its own, as an app worker writes: a chat,
    its message and reply, and a usage line, again and again until stopped."""

    def __init__(self, target: str, name: str, usage_log: Path):
        self.target, self.name, self.usage_log = target, name, usage_log
        self.steps = 0
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ChatWriter":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive()
        if self.failure is not None:
            raise self.failure

    def wait_for(self, steps: int, timeout_s: float = 60) -> int:
        """Block until at least ``steps`` are written; the number written."""
        with self._lock:
            assert self._lock.wait_for(lambda: self.steps >= steps or self.failure, timeout_s), self.steps
            if self.failure is not None:
                raise self.failure
            return self.steps

    def _run(self) -> None:
        try:
            asyncio.run(self._write())
        except BaseException as exc:
            self.failure = exc
            with self._lock:
                self._lock.notify_all()

    async def _write(self) -> None:
        from chainlit.user import User

        from app.kept.saved_chats import data_layer
        layer = data_layer(self.target)
        try:
            user = await layer.create_user(User(identifier=self.name))
            n = 0
            while not self._stop.is_set():
                n += 1
                await write_chat(layer, user.id, self.name, f"busy chat {n}", [f"question {n}", f"answer {n}"])
                append_usage(self.usage_log, 10, 20, user=self.name)
                with self._lock:
                    self.steps += 2
                    self._lock.notify_all()
        finally:
            await layer.engine.dispose()


def every_row(target: str, postgres: bool) -> dict[str, list[dict]]:
    """Every row of every table, each table's rows sorted (for comparing two databases)."""
    async def read() -> dict[str, list[dict]]:
        db = await open_chat_db(target, postgres)
        try:
            return {table: sorted(await db.fetch(f'SELECT * FROM "{table}"'), key=repr)
                    for table in await db.tables()}
        finally:
            await db.close()
    return asyncio.run(read())
