"""``ernie-chat restore DIR``: a backup (``backup.py``) back into the places the settings name.

In this order, so that a refusal changes nothing: the manifest and every file's size and
SHA-256; no `up` running on this machine's run folder; the backup's kind of chat database is the
configured one; no target holds data, unless ``--force``.  Then each SQLite file and the usage
log are written beside their target and renamed over it (a stale ``-wal``/``-shm`` removed
first: SQLite would replay an old log into the new file); a PostgreSQL dump goes in with
``pg_restore --clean --if-exists`` in one transaction.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Callable, Optional

from server.chat_db import without_password
from server.private_files import DIR_MODE, FILE_MODE
from server.progress import run_step
from server.settings import Settings
from server.stack.restart_control import run_folder

from server.data_life import DataLifeError, manifest
from server.data_life.backup import LOG, ticking
from server.data_life.database import (PostgresDatabase, SqliteDatabase, count_rows, pg_connection,
                                       pg_tool)
from server.data_life.places import Places, places_of, refuse_while_up

Say = Callable[[str], None]


def put_back(settings: Settings, folder: Path, force: bool = False, say: Say = print) -> dict:
    data = manifest.read(folder)
    if problems := manifest.verify(folder, data):
        raise DataLifeError(f"The backup in {folder} fails its checks; nothing was restored:\n  "
                            + "\n  ".join(problems) + "\nRestore another backup.")
    refuse_while_up(settings, "a restore")
    places = places_of(settings)
    names = [item["name"] for item in data["files"]]
    targets = {name: target_of(places, name) for name in names}
    if not force:
        held = [f"{label} ({why})" for name in names
                if (label := describe(places, name)) and (why := holds_data(places, name, targets[name]))]
        if held:
            raise DataLifeError(
                "The target already holds data; nothing was restored:\n  " + "\n  ".join(held)
                + "\nTo replace it, back it up first (`ernie-chat backup NEW_DIR`), then run "
                f"`ernie-chat restore {folder} --force`; or point the settings at empty places.")
    for name in names:
        source = folder / name
        if name == manifest.CHATS_POSTGRES:
            pg_restore(places.chat_db, source, run_folder(settings) / LOG)
        else:
            with ticking("restore", f"{name} ..."):
                replace_file(source, targets[name])
        say(f"[restore] {name} -> {describe(places, name)}")
    if data.get("version"):
        say(f"[restore] done: the data of {data.get('finished', '?')}, taken by version {data['version']}")
    return data


def target_of(places: Places, name: str) -> Optional[Path]:
    """Where a part of the backup goes, or a refusal when the settings have no such place."""
    if name in (manifest.CHATS_SQLITE, manifest.CHATS_POSTGRES):
        backup_kind = "PostgreSQL" if name == manifest.CHATS_POSTGRES else "SQLite"
        if places.chat_db is None:
            raise DataLifeError(
                f"The backup holds saved chats ({backup_kind}) and ERNIE_CHAT_DB is unset: set it "
                "(a SQLite file such as data/chats.db, or a PostgreSQL URL) as the stack will run, "
                "then restore again.")
        if (name == manifest.CHATS_POSTGRES) != places.postgres:
            configured = "PostgreSQL" if places.postgres else "SQLite"
            raise DataLifeError(
                f"The backup's saved chats are {backup_kind}, ERNIE_CHAT_DB is {configured}: "
                f"a restore goes into the same kind. Set ERNIE_CHAT_DB to a {backup_kind} "
                f"{'URL' if backup_kind == 'PostgreSQL' else 'file'} and restore again.")
        return places.chat_file
    if name == manifest.AUTH_SQLITE:
        if places.auth_db is None:  # can only be with a PostgreSQL chat db: refused above, or
            raise DataLifeError(   # a backup of a login store alone
                "The backup holds a SQLite login store and ERNIE_CHAT_DB is PostgreSQL, which "
                "keeps the login store itself: unset ERNIE_CHAT_DB to restore this backup.")
        return places.auth_db
    return places.usage_log


def describe(places: Places, name: str) -> str:
    if name == manifest.CHATS_POSTGRES:
        return f"the PostgreSQL chat database {without_password(places.chat_db)}"
    return str(target_of(places, name))


def holds_data(places: Places, name: str, target: Optional[Path]) -> Optional[str]:
    """Why the target counts as holding data (rows in it, bytes in a log), or None."""
    if name == manifest.CHATS_POSTGRES:
        return asyncio.run(_postgres_rows(places.chat_db))
    if target is None or not target.exists():
        return None
    if name == manifest.USAGE:
        return f"{target.stat().st_size:,} bytes" if target.stat().st_size else None
    db = SqliteDatabase(target)
    try:
        rows = asyncio.run(count_rows(db))
    except DataLifeError:
        return f"{target.stat().st_size:,} bytes that are not a usable SQLite database"
    finally:
        db.db.close()
    return _rows_text(rows)


async def _postgres_rows(url: str) -> Optional[str]:
    db = await PostgresDatabase.connect(url)
    try:
        return _rows_text(await count_rows(db))
    finally:
        await db.close()


def _rows_text(rows: dict[str, int]) -> Optional[str]:
    held = {name: n for name, n in rows.items() if n}
    return ", ".join(f"{n:,} rows in {name}" for name, n in held.items()) or None


def replace_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    temporary = target.with_name(f".{target.name}.restoring-{os.getpid()}")
    try:
        with open(source, "rb") as src, open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                                     FILE_MODE), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        for suffix in ("-wal", "-shm", "-journal"):
            target.with_name(target.name + suffix).unlink(missing_ok=True)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def pg_restore(url: str, dump: Path, log: Path) -> None:
    tool_url, env = pg_connection(url)
    run_step([pg_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--no-privileges",
              "--single-transaction", "--exit-on-error", f"--dbname={tool_url}", str(dump)],
             "restore", log, env=env, done_message=f"pg_restore into {tool_url}")
