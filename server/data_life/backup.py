"""``ernie-chat backup DIR``: everything a run keeps, consistent while the stack serves.

- a SQLite database (the saved chats, the login store) through SQLite's online backup API: one
  step, under one read transaction, so the copy is the database at one moment while the app's
  workers go on writing (its write-ahead log lets them); the copy is a single file
  (journal_mode DELETE) checked with ``PRAGMA quick_check``;
- a PostgreSQL chat database through ``pg_dump`` (one snapshot; the login store's tables are in
  it), custom format, without owners or grants, so that it restores into another database;
- the usage log up to its last whole line (the app appends whole lines; a line being written is
  the next backup's).

The folder must be new or empty, is made 0700 and each file 0600; the manifest is written last,
so a folder without one is a backup that did not finish (and ``restore`` refuses it).
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from server.private_files import DIR_MODE, FILE_MODE, write_private
from server.progress import StatusLine, run_step
from server.settings import Settings
from server.stack.restart_control import run_folder

from server.data_life import DataLifeError, manifest
from server.data_life.database import BUSY_TIMEOUT_S, pg_connection, pg_tool
from server.data_life.places import Places, places_of

Say = Callable[[str], None]
LOG = "data-life.log"  # in the run folder: what pg_dump and pg_restore said


def empty_folder(folder: Path) -> bool:
    """Make ``folder`` (0700) unless it exists; True if this made it.  Refuses a folder that
    holds anything: a backup never mixes with other files, nor overwrites an earlier one."""
    if folder.exists() and not folder.is_dir():
        raise DataLifeError(f"{folder} is a file, not a folder: name a new folder for the backup.")
    if folder.is_dir() and any(folder.iterdir()):
        raise DataLifeError(f"{folder} is not empty: a backup goes into a new or empty folder, "
                            "so that it never overwrites another. Name a new one, e.g. "
                            f"backups/{time.strftime('%Y-%m-%d')}.")
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    folder.chmod(DIR_MODE)
    return made


@contextmanager
def ticking(label: str, detail: str, every_s: float = 1.0) -> Iterator[None]:
    """A live status line (the elapsed time) while a step that says nothing runs: a large
    database's copy never looks hung.  Plain lines every 15 s when not on a terminal."""
    status, done = StatusLine(label), threading.Event()

    def tick() -> None:
        while not done.wait(every_s):
            status.update(detail)
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        if status.tty:
            status.stream.write("\r" + " " * (shutil.get_terminal_size((100, 20)).columns - 1) + "\r")
            status.stream.flush()


def sqlite_copy(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite database, as one file of mode 0600."""
    target.touch(mode=FILE_MODE)
    target.chmod(FILE_MODE)
    src = sqlite3.connect(source.resolve().as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        dst = sqlite3.connect(target)
        try:
            # All pages in one step: in steps, every write of the app in between would start the
            # copy again (and under steady writes it might never end).
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # one file, no -wal beside it
            check = dst.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            dst.close()
    except sqlite3.Error as exc:
        raise DataLifeError(f"{source} could not be copied ({exc}); the backup is incomplete.") from exc
    finally:
        src.close()
    if check != "ok":
        raise DataLifeError(f"The copy of {source} fails SQLite's check ({check}): the database "
                            "itself may be damaged; see https://sqlite.org/recovery.html.")


def copy_whole_lines(source: Path, target: Path) -> None:
    """The file up to its last line end, as it is now (it may grow meanwhile)."""
    with open(source, "rb") as src:
        size = src.seek(0, 2)
        src.seek(0)
        data = src.read(size)
    end = data.rfind(b"\n") + 1
    target.touch(mode=FILE_MODE)
    target.chmod(FILE_MODE)
    target.write_bytes(data[:end])


def take(settings: Settings, folder: Path, version: str, say: Say = print) -> dict:
    """Back up what ``settings`` keep into ``folder``; the manifest written."""
    places = places_of(settings)
    parts = planned(places, run_folder(settings) / LOG)
    if not parts:
        raise DataLifeError(
            "Nothing to back up: no saved chats (ERNIE_CHAT_DB unset), no login store at "
            f"{places.auth_db} and no usage log at {places.usage_log}. Run the command with the "
            "settings (.env, ERNIE_*) the stack runs with.")
    made = empty_folder(folder)
    started = time.time()
    entries = []
    try:
        for name, work in parts:
            began = time.monotonic()
            with ticking("backup", f"{name} ..."):
                work(folder / name)
            (folder / name).chmod(FILE_MODE)
            entries.append(manifest.entry(folder, name))
            say(f"[backup] {name}: {manifest.size_text(entries[-1].bytes)} in "
                f"{time.monotonic() - began:.1f} s")
        kind = "postgresql" if places.postgres else "sqlite" if places.chat_db else "off"
        data = manifest.manifest(entries, version, kind, started, time.time())
        write_private(folder / manifest.NAME, _json(data))
    except BaseException:
        # Never leave what looks like a backup but is not one.
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for name, _ in parts:
                (folder / name).unlink(missing_ok=True)
        raise
    return data


def planned(places: Places, log: Path) -> list[tuple[str, Callable[[Path], None]]]:
    """(the backup's file name, what writes it) for each part these places hold now."""
    parts: list[tuple[str, Callable[[Path], None]]] = []
    if places.postgres:
        parts.append((manifest.CHATS_POSTGRES, lambda target: pg_dump(places.chat_db, target, log)))
    elif places.chat_file is not None:
        if not places.chat_file.is_file():
            raise DataLifeError(f"ERNIE_CHAT_DB={places.chat_file} does not exist: check the "
                                "setting (the stack creates the file at its first start).")
        parts.append((manifest.CHATS_SQLITE, lambda target: sqlite_copy(places.chat_file, target)))
    if places.auth_db is not None and places.auth_db.is_file():
        parts.append((manifest.AUTH_SQLITE, lambda target: sqlite_copy(places.auth_db, target)))
    if places.usage_log.is_file():
        parts.append((manifest.USAGE, lambda target: copy_whole_lines(places.usage_log, target)))
    return parts


def pg_dump(url: str, target: Path, log: Path) -> None:
    tool_url, env = pg_connection(url)
    target.touch(mode=FILE_MODE)
    run_step([pg_tool("pg_dump"), "--format=custom", "--no-owner", "--no-privileges",
              f"--file={target}", f"--dbname={tool_url}"], "backup", log, env=env,
             done_message=f"pg_dump of {tool_url}")


def _json(data: dict) -> str:
    import json
    return json.dumps(data, indent=2) + "\n"
