"""One user's data: everything of theirs for them to take (``export-user``), or removed for good
(``delete-user``).

A user is their login name: ERNIE_USERS's name, or the provider's claim (an e-mail address).
Theirs are:

- in the chat database: their ``users`` row, their chats (``threads``) with each chat's messages
  (``steps``), attached elements and feedback, and the ``shares`` of those chats;
- in the login store (server/auth_store.py): their per-user limit counts (``user_limit_keys``,
  ``messages:user:NAME`` and ``tokens:user:NAME``), their login throttle counts
  (``auth_login_keys``: ``newdev:NAME``, and ``pair:ADDRESS:NAME``, which names where they logged
  in from) and the time they were last signed out everywhere (``auth_signed_out``);
- the usage log's lines with their name, and in the chat database their usage records and the
  audit records that name them (server/chat_records.py): sign-ins and their addresses, shares,
  admin page views.  A deletion removes those and writes one audit record of its own, which names
  them: that a user was deleted, and when, is the operator's record, kept (an export leaves it
  out, and a later search finds nothing of theirs);
- without saved chats, the live chats' files (ERNIE_LIVE_CHATS_DIR) that name them.

Logins are signed tokens kept by the browser, not by the server: there is no session row to
export or delete.  A deletion therefore first signs the user out everywhere (as
``revoke-sessions``): the one row it leaves is that mark, their name and the time, which refuses
every token issued before it until it would have expired anyway.  The export leaves out what
would let its holder in: password fingerprints in the account's metadata, session tokens, and
the secret token of each shared link (its chat and date are kept).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from server.auth_store import LIMIT_KEYS, LOGIN_KEYS, open_store
from server.chat_records import AUDIT_TABLE, DELETE_USER, USAGE_TABLE
from server.private_files import FILE_MODE
from server.settings import Settings
from server.usage_log import lines as usage_lines

from server.data_life import DataLifeError, NoSuchUser, audit
from server.data_life.database import Database, SqliteDatabase, open_chat_db
from server.data_life.places import Places, places_of

# The user's chats: by their users row's id, or by their name (Chainlit writes both).
THREADS = ('(SELECT "id" FROM threads WHERE "userIdentifier" = $1 OR "userId" IN '
           '(SELECT "id" FROM users WHERE "identifier" = $1))')
SIGNED_OUT = "auth_signed_out"
# The audit records of a user: all that name them but the records of their deletion.
THEIR_AUDIT = 'WHERE "name" = $1 AND "action" <> $2'
# Never in an export: what proves a login, or opens a link.
SECRET_METADATA = ("key", "login")
JSON_COLUMNS = ("metadata", "generation", "modes", "props", "playerConfig")
CHAT_FILE_SUFFIXES = (".chat", ".reply")


@dataclass
class Found:
    """Everything of one user, as read from each place."""

    name: str
    accounts: list[dict] = field(default_factory=list)
    chats: list[dict] = field(default_factory=list)  # each with "messages", "elements", "feedback"
    shares: list[dict] = field(default_factory=list)
    limit_rows: list[dict] = field(default_factory=list)
    login_rows: list[dict] = field(default_factory=list)
    signed_out_at: Optional[float] = None
    usage: list[dict] = field(default_factory=list)
    usage_rows: list[dict] = field(default_factory=list)
    audit_rows: list[dict] = field(default_factory=list)
    live_files: list[Path] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {"accounts": len(self.accounts), "chats": len(self.chats),
                "messages": sum(len(c["messages"]) for c in self.chats),
                "elements": sum(len(c["elements"]) for c in self.chats),
                "feedback": sum(len(c["feedback"]) for c in self.chats),
                "shared links": len(self.shares), "limit counts": len(self.limit_rows),
                "login counts": len(self.login_rows), "usage lines": len(self.usage),
                "usage records": len(self.usage_rows), "audit records": len(self.audit_rows),
                "live chat files": len(self.live_files)}

    @property
    def empty(self) -> bool:
        # A sign-out mark alone is what a deletion leaves: nothing of theirs.
        return not any(self.counts().values())


def checked_name(name: str) -> str:
    if not name or name != name.strip() or any(ord(c) < 32 for c in name):
        raise NoSuchUser(f"{name!r} is not a user name: give the login name exactly, as in "
                         "ERNIE_USERS or the sign-in provider's claim (no spaces around it).")
    return name


# --- reading -------------------------------------------------------------------------------------

def find(settings: Settings, name: str) -> Found:
    return asyncio.run(_find(places_of(settings), checked_name(name)))


async def _find(places: Places, name: str) -> Found:
    found = Found(name)
    if places.chat_db is not None:
        db = await open_chat_db(places.chat_db, places.postgres)
        try:
            await _read_chats(db, found)
            if places.postgres:
                await _read_login_store(db, found)
        finally:
            await db.close()
    if places.auth_db is not None and places.auth_db.is_file():
        db = SqliteDatabase(places.auth_db)
        try:
            await _read_login_store(db, found)
        finally:
            await db.close()
    if places.usage_log.is_file():
        found.usage = [r for r in usage_lines(places.usage_log) if r is not None and r.get("user") == name]
    found.live_files = live_chat_files(places.live_chats_dir, name)
    return found


async def _read_chats(db: Database, found: Found) -> None:
    tables = await db.tables()
    if "threads" not in tables:
        return
    name = found.name
    found.accounts = await db.fetch('SELECT * FROM users WHERE "identifier" = $1', name)
    found.chats = await db.fetch(f'SELECT * FROM threads WHERE "id" IN {THREADS} '
                                 'ORDER BY "createdAt", "id"', name)
    # One query a table for all their chats: steps have no index by chat, and a query per chat
    # would read the whole table once for each.
    by_chat = {chat["id"]: chat for chat in found.chats}
    for key, query in (("messages", f'SELECT * FROM steps WHERE "threadId" IN {THREADS} '
                                    'ORDER BY "createdAt", "start", "id"'),
                       ("elements", f'SELECT * FROM elements WHERE "threadId" IN {THREADS}'),
                       ("feedback", f'SELECT * FROM feedbacks WHERE "threadId" IN {THREADS}')):
        for chat in found.chats:
            chat[key] = []
        for row in await db.fetch(query, name):
            by_chat[row["threadId"]][key].append(row)
    if "shares" in tables:
        found.shares = await db.fetch(f'SELECT * FROM shares WHERE "userIdentifier" = $1 '
                                      f'OR "threadId" IN {THREADS}', name)
    if USAGE_TABLE in tables:
        found.usage_rows = await db.fetch(f'SELECT * FROM {USAGE_TABLE} WHERE "name" = $1 ORDER BY "at", "id"', name)
    if AUDIT_TABLE in tables:
        found.audit_rows = await db.fetch(f'SELECT * FROM {AUDIT_TABLE} {THEIR_AUDIT} ORDER BY "at", "id"',
                                          name, DELETE_USER)


def limit_keys(name: str) -> list[str]:
    """app/auth/user_limits.py's keys of a login name."""
    return [f"{kind}:user:{name[:200]}" for kind in ("messages", "tokens")]


def is_login_key(key: str, name: str) -> bool:
    """app/auth/login_throttle.py's keys that name this user."""
    return key == f"newdev:{name}" or (key.startswith("pair:") and key.endswith(f":{name}"))


async def _read_login_store(db: Database, found: Found) -> None:
    tables = await db.tables()
    if LIMIT_KEYS in tables:
        keys = limit_keys(found.name)
        found.limit_rows = await db.fetch(f"SELECT * FROM {LIMIT_KEYS} WHERE key = $1 OR key = $2", *keys)
    if LOGIN_KEYS in tables:
        rows = await db.fetch(f"SELECT * FROM {LOGIN_KEYS} WHERE key LIKE 'pair:%' OR key = $1",
                              f"newdev:{found.name}")
        found.login_rows = [row for row in rows if is_login_key(row["key"], found.name)]
    if SIGNED_OUT in tables:
        rows = await db.fetch(f"SELECT at FROM {SIGNED_OUT} WHERE name = $1", found.name)
        found.signed_out_at = rows[0]["at"] if rows else None


def live_chat_files(folder: Path, name: str) -> list[Path]:
    """The live chats' files (app/kept/chat_files.py) whose record names this user."""
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.iterdir()):
        if path.suffix not in CHAT_FILE_SUFFIXES or not path.is_file():
            continue
        try:
            record = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("user") == name:
            found.append(path)
    return found


def refuse_unknown(found: Found, settings: Settings) -> None:
    if not found.empty:
        return
    known = known_names(places_of(settings))
    hint = (f" Users with saved chats: {', '.join(known[:20])}{' ...' if len(known) > 20 else ''}."
            if known else "")
    raise NoSuchUser(f"Nothing of {found.name!r} was found: no saved chats, shared links, usage "
                     f"lines, login or limit counts under that name.{hint} Give the login name "
                     "exactly (names are case-sensitive).")


def known_names(places: Places) -> list[str]:
    if places.chat_db is None:
        return []

    async def read() -> list[str]:
        db = await open_chat_db(places.chat_db, places.postgres)
        try:
            if "users" not in await db.tables():
                return []
            return [r["identifier"] for r in await db.fetch('SELECT "identifier" FROM users ORDER BY 1')]
        finally:
            await db.close()
    return asyncio.run(read())


# --- export --------------------------------------------------------------------------------------

def _parsed(row: dict) -> dict:
    out = {}
    for key, value in row.items():
        if key in JSON_COLUMNS and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        out[key] = value
    return out


def _when(seconds: Optional[float]) -> Optional[str]:
    return None if seconds is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def export_record(found: Found, version: str, now: float) -> dict:
    """The export's JSON: plain values, nothing that lets its holder in."""
    accounts = []
    for account in map(_parsed, found.accounts):
        if isinstance(account.get("metadata"), dict):
            account["metadata"] = {k: v for k, v in account["metadata"].items() if k not in SECRET_METADATA}
        accounts.append(account)
    chats = []
    for chat in found.chats:
        chats.append({**_parsed({k: v for k, v in chat.items() if k not in ("messages", "elements", "feedback")}),
                      "messages": [_parsed(m) for m in chat["messages"]],
                      "elements": [_parsed(e) for e in chat["elements"]],
                      "feedback": [_parsed(f) for f in chat["feedback"]]})
    shares = [{k: v for k, v in share.items() if k != "token"} for share in found.shares]
    logins = []
    for row in found.login_rows:
        where = row["key"][len("pair:"):-len(found.name) - 1] if row["key"].startswith("pair:") else "a new device"
        logins.append({"from": where, "failed_logins": row["failures"], "updated": _when(row["updated"])})
    return {
        "user": found.name, "exported": _when(now), "project": "ernie-chat", "version": version,
        "account": accounts, "chats": chats, "shared_links": shares,
        "usage": found.usage, "usage_records": found.usage_rows, "audit_records": found.audit_rows,
        "sessions": {
            "note": "Logins are signed tokens kept by the browser; the server keeps none of them, "
                    "only when the user was last signed out everywhere, failed-login counts by "
                    "where they came from, and the per-user limit counts.",
            "signed_out_everywhere_at": _when(found.signed_out_at),
            "failed_login_counts": logins,
            "limit_counts": [{"limit": row["key"].split(":", 1)[0], "allowance_whole_again_at":
                              _when(row["ready_at"])} for row in found.limit_rows],
        },
    }


def chat_markdown(chat: dict) -> str:
    """One chat as its user read it: their messages and the replies, in order."""
    lines = [f"# {chat.get('name') or 'Untitled chat'}", "", f"Started {chat.get('createdAt') or '?'}", ""]
    for message in chat["messages"]:
        who = {"user_message": "You", "assistant_message": "Assistant"}.get(message.get("type"))
        if who is None:
            continue
        text = message.get("output") or message.get("input") or ""
        lines += [f"**{who}** ({message.get('createdAt') or '?'}):", "", text, ""]
    return "\n".join(lines)


def slug(text: str) -> str:
    return re.sub(r"[^\w-]+", "-", text, flags=re.UNICODE).strip("-")[:60] or "chat"


def export_zip(record: dict) -> bytes:
    """export.json (everything), and chats/NN-title.md for each chat."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("export.json", json.dumps(record, indent=2, ensure_ascii=False, default=str))
        for n, chat in enumerate(record["chats"], 1):
            archive.writestr(f"chats/{n:03d}-{slug(chat.get('name') or '')}.md", chat_markdown(chat))
    return buffer.getvalue()


def write_export(settings: Settings, name: str, out: Path, version: str) -> Found:
    if out.exists():
        raise DataLifeError(f"{out} exists: an export never overwrites a file. Name another with --out.")
    if not out.parent.is_dir():
        raise DataLifeError(f"No folder {out.parent} for {out}: make it, or name another with --out.")
    found = find(settings, name)
    refuse_unknown(found, settings)
    data = export_zip(export_record(found, version, time.time()))
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with open(fd, "wb") as handle:
        handle.write(data)
    return found


# --- delete --------------------------------------------------------------------------------------

def delete(settings: Settings, name: str) -> dict[str, int]:
    """Sign ``name`` out everywhere, then remove all of theirs; the counts removed."""
    places = places_of(settings)
    name = checked_name(name)
    return asyncio.run(_delete(places, name))


async def _delete(places: Places, name: str) -> dict[str, int]:
    store = open_store(places.chat_db, places.auth_db or Path("unused"))
    try:
        await store.sign_out(name, time.time())  # first: no new request of theirs is served
    finally:
        await store.close()
    removed: dict[str, int] = {}
    if places.chat_db is not None:
        db = await open_chat_db(places.chat_db, places.postgres)
        try:
            async with db.transaction():
                removed.update(await _delete_chats(db, name))
                removed.update(await _delete_records(db, name))
                if places.postgres:
                    removed.update(await _delete_login_rows(db, name))
        finally:
            await db.close()
    if places.auth_db is not None and places.auth_db.is_file():
        db = SqliteDatabase(places.auth_db)
        try:
            async with db.transaction():
                removed.update(await _delete_login_rows(db, name))
        finally:
            await db.close()
    removed["usage lines"] = drop_usage_lines(places.usage_log, name)
    files = live_chat_files(places.live_chats_dir, name)
    for path in files:
        path.unlink(missing_ok=True)
    removed["live chat files"] = len(files)
    return removed


async def _delete_chats(db: Database, name: str) -> dict[str, int]:
    tables = await db.tables()
    if "threads" not in tables:
        return {}
    removed = {}
    # Children first: SQLite enforces no foreign keys unless asked, so nothing cascades there.
    for label, table in (("feedback", "feedbacks"), ("elements", "elements"), ("messages", "steps")):
        removed[label] = await db.execute(f'DELETE FROM {table} WHERE "threadId" IN {THREADS}', name)
    if "shares" in tables:
        removed["shared links"] = await db.execute(
            f'DELETE FROM shares WHERE "userIdentifier" = $1 OR "threadId" IN {THREADS}', name)
    if "search_texts" in tables:  # the search's index of their chats (app/kept/search_index.py)
        await db.execute(f'DELETE FROM search_texts WHERE "threadId" IN {THREADS}', name)
        if db.kind == "sqlite":  # the trigram index drops a deleted text's entries when merged
            await db.execute("INSERT INTO search_trigrams (search_trigrams) VALUES ('optimize')")
    removed["chats"] = await db.execute(f'DELETE FROM threads WHERE "id" IN {THREADS}', name)
    removed["accounts"] = await db.execute('DELETE FROM users WHERE "identifier" = $1', name)
    return removed


async def _delete_records(db: Database, name: str) -> dict[str, int]:
    """Their usage and audit records; then the deletion's own audit record."""
    tables = await db.tables()
    removed = {}
    if USAGE_TABLE in tables:
        removed["usage records"] = await db.execute(f'DELETE FROM {USAGE_TABLE} WHERE "name" = $1', name)
    if AUDIT_TABLE in tables:
        removed["audit records"] = await db.execute(f'DELETE FROM {AUDIT_TABLE} {THEIR_AUDIT}', name, DELETE_USER)
    await audit.write(db, DELETE_USER, name)
    return removed


async def _delete_login_rows(db: Database, name: str) -> dict[str, int]:
    tables = await db.tables()
    removed = {"limit counts": 0, "login counts": 0}
    if LIMIT_KEYS in tables:
        removed["limit counts"] = await db.execute(
            f"DELETE FROM {LIMIT_KEYS} WHERE key = $1 OR key = $2", *limit_keys(name))
    if LOGIN_KEYS in tables:
        rows = await db.fetch(f"SELECT key FROM {LOGIN_KEYS} WHERE key LIKE 'pair:%' OR key = $1",
                              f"newdev:{name}")
        for row in rows:
            if is_login_key(row["key"], name):
                removed["login counts"] += await db.execute(f"DELETE FROM {LOGIN_KEYS} WHERE key = $1", row["key"])
    return removed


def drop_usage_lines(path: Path, name: str) -> int:
    """Rewrite the usage log without ``name``'s lines; the number removed.

    The app appends while this runs: the new file is renamed over the old, and whatever reached
    the old file meanwhile (its writers opened it before the rename) is carried over after."""
    if not path.is_file():
        return 0
    removed = 0
    temporary = path.with_name(f".{path.name}.rewrite-{os.getpid()}")
    with open(path, "rb") as old:
        kept, removed = _without(old.read(), name)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with open(fd, "wb") as new:
            new.write(kept)
        os.replace(temporary, path)
        late, late_removed = _without(old.read(), name)  # appended to the old file meanwhile
    if late:
        with open(path, "ab") as new:
            new.write(late)
    return removed + late_removed


def _without(data: bytes, name: str) -> tuple[bytes, int]:
    kept, removed = [], 0
    for line in data.splitlines(keepends=True):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and record.get("user") == name:
            removed += 1
        else:
            kept.append(line)
    return b"".join(kept), removed


def summary(counts: dict[str, int]) -> str:
    order = list(Found("").counts())
    ranked = sorted(counts.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order))
    return ", ".join(f"{label}: {n:,}" for label, n in ranked)
