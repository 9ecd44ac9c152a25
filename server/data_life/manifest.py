"""A backup's manifest (``manifest.json`` in its folder): what each file is, its size and
SHA-256, the project's version and when; and the checks a restore makes first.  Pure but for
reading the files it names."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from server.data_life import DataLifeError

NAME = "manifest.json"
FORMAT = 1
# Each part a backup may hold: its file name in the backup folder, and what it is.
CHATS_SQLITE, CHATS_POSTGRES = "chats.db", "chats.pgdump"
AUTH_SQLITE, USAGE = "auth.db", "usage.jsonl"
WHAT = {
    CHATS_SQLITE: "saved chats and shared links (SQLite online backup of ERNIE_CHAT_DB)",
    CHATS_POSTGRES: "saved chats, shared links and the login store (pg_dump of ERNIE_CHAT_DB)",
    AUTH_SQLITE: "the login store: sign-outs, login and limit counts (SQLite online backup of "
                 "ERNIE_AUTH_DB)",
    USAGE: "the usage log (ERNIE_USAGE_LOG), up to its last whole line",
}


@dataclass(frozen=True)
class Entry:
    name: str
    what: str
    bytes: int
    sha256: str


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} bytes"


def entry(folder: Path, name: str) -> Entry:
    path = folder / name
    return Entry(name, WHAT[name], path.stat().st_size, sha256(path))


def manifest(entries: list[Entry], version: str, chat_db: str, started: float, ended: float) -> dict:
    """``chat_db``: "sqlite", "postgresql" or "off"."""
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    return {"format": FORMAT, "project": "ernie-chat", "version": version, "chat_db": chat_db,
            "started": stamp(started), "finished": stamp(ended),
            "files": [asdict(e) for e in entries]}


def read(folder: Path) -> dict:
    path = folder / NAME
    if not folder.is_dir():
        raise DataLifeError(f"No backup folder at {folder}: name the folder `ernie-chat backup` wrote.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataLifeError(f"{folder} has no {NAME}: it is not a folder `ernie-chat backup` wrote "
                            "(or the backup did not finish). Name a complete backup.") from None
    except ValueError as exc:
        raise DataLifeError(f"{path} is not valid JSON ({exc}): the backup is damaged.") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), list):
        raise DataLifeError(f"{path} is not a manifest this version reads (format {FORMAT} expected).")
    return data


def verify(folder: Path, data: dict) -> list[str]:
    """Every problem with the backup's files: missing, of another size or checksum, unknown."""
    problems = []
    for item in data["files"]:
        name = item.get("name") if isinstance(item, dict) else None
        if name not in WHAT or Path(name).name != name:
            problems.append(f"{name!r}: not a part of a backup")
            continue
        path = folder / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif path.stat().st_size != item.get("bytes"):
            problems.append(f"{name}: {path.stat().st_size:,} bytes, the manifest says {item.get('bytes')}")
        elif sha256(path) != item.get("sha256"):
            problems.append(f"{name}: its SHA-256 differs from the manifest's")
    return problems
