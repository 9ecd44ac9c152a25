"""Where a run keeps what must survive (docs/settings.md, "Where a run keeps its files"), as
this machine's settings say, and whether an `ernie-chat up` runs on it now.

- the saved chats: ERNIE_CHAT_DB, a SQLite file or a PostgreSQL URL (shares in it too);
- the login store (sign-outs, login and limit counts): ERNIE_AUTH_DB, a SQLite file, or tables in
  the PostgreSQL chat database when there is one (server/auth_store.py);
- the usage log: ERNIE_USAGE_LOG (server/usage_log.py);
- the live chats' files (ERNIE_LIVE_CHATS_DIR): only chats in flight, without saved chats; not
  worth a backup, but one user's files are theirs to delete.

Relative paths are the checkout's, where `up` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from server.chat_db import is_postgres
from server.paths import ROOT
from server.settings import Settings
from server.stack.restart_control import alive, read_json, run_folder, supervisor_file

from server.data_life import DataLifeError


@dataclass(frozen=True)
class Places:
    chat_db: Optional[str]  # a PostgreSQL URL, or the SQLite file's absolute path; None: off
    auth_db: Optional[Path]  # the login store's SQLite file; None when it is in PostgreSQL
    usage_log: Path
    live_chats_dir: Path

    @property
    def postgres(self) -> bool:
        return self.chat_db is not None and is_postgres(self.chat_db)

    @property
    def chat_file(self) -> Optional[Path]:
        return None if self.chat_db is None or self.postgres else Path(self.chat_db)


def absolute(path: Path, root: Path = ROOT) -> Path:
    return path if path.is_absolute() else root / path


def places_of(settings: Settings, root: Path = ROOT) -> Places:
    chat_db = settings.chat_db
    if chat_db is not None and not is_postgres(chat_db):
        chat_db = str(absolute(Path(chat_db), root))
    auth_db = None if chat_db is not None and is_postgres(chat_db) else absolute(settings.auth_db, root)
    return Places(chat_db, auth_db, absolute(settings.usage_log, root),
                  absolute(settings.live_chats_dir, root))


def running_up(settings: Settings, root: Path = ROOT) -> Optional[int]:
    """The process id of the `ernie-chat up` that runs on these settings' run folder, or None."""
    pid = read_json(supervisor_file(run_folder(settings, root))).get("pid")
    return pid if isinstance(pid, int) and alive(pid) else None


def refuse_while_up(settings: Settings, what: str, root: Path = ROOT) -> None:
    if (pid := running_up(settings, root)) is not None:
        raise DataLifeError(
            f"`ernie-chat up` runs (pid {pid}, {supervisor_file(run_folder(settings, root))}): "
            f"{what} would change the data under it. Stop it first (Ctrl-C, or `systemctl stop "
            "ernie-chat`), then run this again.")
