"""Backups, restores, one user's export and deletion, on real SQLite files and a real PostgreSQL
database, with chats written meanwhile as the app's workers write them; a deleted user's session
cookie refused by the real app (the search tests' app: chats written, no engine needed)."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict

import httpx
import pytest

from app.kept import search_index
from server import chat_db
from server.auth_store import LIMIT_KEYS, LOGIN_KEYS, KeyState, open_store
from server.data_life import backup, restore, user_data
from server.chat_records import DELETE_USER, NOT_A_USER, SHARE, SIGN_IN, SIGN_IN_REFUSED
from server.data_life.places import places_of
from server.paths import ROOT
from server.usage_log import append_usage
from tests.support.admin import login
from tests.support.data_life import ChatWriter, chat_settings, every_row, write_chat, write_records
from tests.support.search import CHATS, write_chats


@pytest.fixture(params=["sqlite", "postgres"])
def kind(request) -> str:
    return request.param


def new_target(request, kind: str, folder) -> str:
    if kind == "sqlite":
        return str(folder / "chats.db")
    return request.getfixturevalue("postgres_server").new_database()


async def _share(target: str, thread: str, user: str) -> str:
    from app.kept.saved_chats import data_layer
    from app.pages import share_links
    layer = data_layer(target)
    try:
        return (await share_links.share(layer, thread, user, "https://chat.example.com")).token
    finally:
        await layer.engine.dispose()


async def _shared_thread(target: str, token: str):
    from app.kept.saved_chats import data_layer
    from app.pages import share_links
    layer = data_layer(target)
    try:
        found = await share_links.find(layer, token)
        return found.thread_id if found else None
    finally:
        await layer.engine.dispose()


async def _admin_rows(target: str) -> list[dict]:
    """The admin page's figures per day and user (app/pages/admin_figures.py): messages and chats,
    replies and tokens."""
    from app.kept.saved_chats import data_layer
    from app.pages.admin_figures import stored
    layer = data_layer(target)
    try:
        since = (dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=2)).isoformat()
        found = await stored(layer.engine, since)
        usage = [{"day": day, "name": name, **asdict(row)} for (day, name), row in found.usage.per_user.items()]
        return sorted(found.messages + usage, key=repr)
    finally:
        await layer.engine.dispose()


async def _login_state(settings, name: str) -> None:
    """What logins leave in the login store: a sign-out, limit and throttle counts."""
    store = open_store(settings.chat_db, places_of(settings).auth_db)
    try:
        await store.sign_out("someone-who-left", 1_700_000_000.0)
        await store.update_keys([f"messages:user:{name}", f"tokens:user:{name}"],
                                lambda states: states.update(
                                    {k: KeyState(0, 4e9, 4e9) for k in list(states) or
                                     [f"messages:user:{name}", f"tokens:user:{name}"]}), 0, LIMIT_KEYS)
        await store.update_keys([f"pair:addr:10.1.2.3:{name}", f"newdev:{name}"],
                                lambda states: states.update(
                                    {f"pair:addr:10.1.2.3:{name}": KeyState(2, 4e9, 4e9),
                                     f"newdev:{name}": KeyState(1, 4e9, 4e9)}), 0, LOGIN_KEYS)
    finally:
        await store.close()


def _chats_of(rows: dict[str, list[dict]], names: set[str]) -> dict[str, list]:
    """The rows of these users' chats: users, threads, their steps, their shares."""
    users = [u for u in rows["users"] if u["identifier"] in names]
    threads = [t for t in rows["threads"] if t["userIdentifier"] in names]
    ids = {t["id"] for t in threads}
    return {"users": users, "threads": threads,
            "steps": [s for s in rows["steps"] if s["threadId"] in ids],
            "shares": [s for s in rows["shares"] if s["threadId"] in ids]}


def test_a_backup_taken_while_chats_are_written_restores_the_chats_links_and_figures(
        request, kind, tmp_path):
    source_dir, restored_dir = tmp_path / "source", tmp_path / "restored"
    source_dir.mkdir()
    restored_dir.mkdir()
    source = chat_settings(source_dir, new_target(request, kind, source_dir))
    chat_db.prepare_db(source.chat_db)
    ids = asyncio.run(write_chats(source.chat_db))
    token = asyncio.run(_share(source.chat_db, ids["Trip planning"], "alice"))
    asyncio.run(_login_state(source, "alice"))
    append_usage(source.usage_log, 5, 7, user="alice")
    write_records(source.chat_db, ["alice", "alice", "bob"], [(SIGN_IN, "alice")])

    with ChatWriter(source.chat_db, "carol", source.usage_log) as writer:
        before = writer.wait_for(10)
        data = backup.take(source, tmp_path / "backup", "test", say=lambda line: None)
        after = writer.wait_for(writer.steps + 4)  # it went on writing after the copy
    names = {item["name"] for item in data["files"]}
    assert names == ({"chats.pgdump"} if kind == "postgres" else {"chats.db", "auth.db"}) | {"usage.jsonl"}
    assert oct((tmp_path / "backup").stat().st_mode & 0o777) == "0o700"
    assert {oct(p.stat().st_mode & 0o777) for p in (tmp_path / "backup").iterdir()} == {"0o600"}

    target = chat_settings(restored_dir, new_target(request, kind, restored_dir))
    restore.put_back(target, tmp_path / "backup", say=lambda line: None)

    was, now = every_row(source.chat_db, kind == "postgres"), every_row(target.chat_db, kind == "postgres")
    # alice's and bob's chats, written before, come back exactly; the shared link opens the same chat.
    assert _chats_of(now, {"alice", "bob"}) == _chats_of(was, {"alice", "bob"})
    assert len(_chats_of(now, {"alice", "bob"})["threads"]) == sum(map(len, CHATS.values()))
    assert asyncio.run(_shared_thread(target.chat_db, token)) == ids["Trip planning"]
    # carol's, written throughout: what was written before the backup, and nothing that was not
    # in the source; every restored row is the source's row.
    carol = _chats_of(now, {"carol"})["steps"]
    assert before <= len(carol) <= after
    for table, rows in now.items():
        assert all(row in was[table] for row in rows), table
    # The admin page's figures: alice's and bob's the same, carol's as far as the backup went.
    figures = lambda rows: [r for r in rows if r["name"] in ("alice", "bob")]
    restored_figures = figures(asyncio.run(_admin_rows(target.chat_db)))
    assert restored_figures == figures(asyncio.run(_admin_rows(source.chat_db)))
    assert sum(r.get("replies", 0) for r in restored_figures) == 3  # the usage records came back
    assert [r["name"] for r in now["audit_records"]] == ["alice"]
    # The login store (its own SQLite file, or tables of the PostgreSQL database) and the usage log.
    login_rows = now if kind == "postgres" else every_row(str(target.auth_db), False)
    assert {r["name"] for r in login_rows["auth_signed_out"]} == {"someone-who-left"}
    assert {r["key"] for r in login_rows[LIMIT_KEYS]} == {"messages:user:alice", "tokens:user:alice"}
    restored_usage = target.usage_log.read_text().splitlines()
    assert restored_usage == source.usage_log.read_text().splitlines()[:len(restored_usage)]
    assert json.loads(restored_usage[0])["user"] == "alice"


def test_a_restore_refuses_a_target_with_data_and_a_changed_backup(request, kind, tmp_path):
    source = chat_settings(tmp_path / "source", new_target(request, kind, tmp_path / "source"))
    chat_db.prepare_db(source.chat_db)
    asyncio.run(write_chats(source.chat_db))
    backup.take(source, tmp_path / "backup", "test", say=lambda line: None)
    with pytest.raises(backup.DataLifeError, match="not empty"):
        backup.take(source, tmp_path / "backup", "test", say=lambda line: None)
    # Into itself: the chats are there; nothing changes without --force.
    before = every_row(source.chat_db, kind == "postgres")
    with pytest.raises(restore.DataLifeError, match="(?s)already holds data.*--force") as refused:
        restore.put_back(source, tmp_path / "backup", say=lambda line: None)
    assert "rows in threads" in str(refused.value)
    asyncio.run(_delete_everything(source.chat_db, kind == "postgres"))
    restore.put_back(source, tmp_path / "backup", force=True, say=lambda line: None)
    assert every_row(source.chat_db, kind == "postgres") == before
    # A backup changed after it was taken is refused before anything is touched.
    dump = next(p for p in (tmp_path / "backup").iterdir() if p.name.startswith("chats."))
    changed = bytearray(dump.read_bytes())
    changed[len(changed) // 2] ^= 0xFF  # one byte, the size kept
    dump.write_bytes(bytes(changed))
    with pytest.raises(restore.DataLifeError, match="SHA-256 differs"):
        restore.put_back(source, tmp_path / "backup", force=True, say=lambda line: None)
    assert every_row(source.chat_db, kind == "postgres") == before


async def _delete_everything(target: str, postgres: bool) -> None:
    from server.data_life.database import open_chat_db
    db = await open_chat_db(target, postgres)
    try:
        for table in ("feedbacks", "elements", "steps", "shares", "threads", "users"):
            await db.execute(f'DELETE FROM "{table}"')
    finally:
        await db.close()


def test_delete_user_leaves_no_row_or_file_of_theirs_and_others_keep_theirs(request, kind, tmp_path):
    settings = chat_settings(tmp_path, new_target(request, kind, tmp_path))
    chat_db.prepare_db(settings.chat_db)
    asyncio.run(write_chats(settings.chat_db))  # alice's and bob's

    async def carols() -> tuple[str, list[str]]:
        from chainlit.user import User

        from app.kept.saved_chats import data_layer
        layer = data_layer(settings.chat_db)
        try:
            user = await layer.create_user(User(identifier="carol"))
            threads = [await write_chat(layer, user.id, "carol", f"carol's chat {n}", ["hi", "hello"])
                       for n in range(3)]
            return user.id, threads
        finally:
            await layer.engine.dispose()
    carol_id, threads = asyncio.run(carols())
    asyncio.run(_share(settings.chat_db, threads[0], "carol"))
    asyncio.run(_login_state(settings, "carol"))
    asyncio.run(_login_state(settings, "alice"))
    for user in ("carol", "alice", "carol"):
        append_usage(settings.usage_log, 3, 4, user=user)
    write_records(settings.chat_db, ["carol", "alice", "carol"],
                  [(SIGN_IN, "carol"), (SHARE, "carol"), (SIGN_IN, "alice"), (SIGN_IN_REFUSED, NOT_A_USER)])
    settings.live_chats_dir.mkdir(mode=0o700)
    (settings.live_chats_dir / "a1.chat").write_text(json.dumps({"user": "carol", "turns": []}))
    (settings.live_chats_dir / "b2.chat").write_text(json.dumps({"user": "alice", "turns": []}))
    search_index.build(str(settings.chat_db), lambda line: None)  # as the app's start indexes the chats
    before = every_row(settings.chat_db, kind == "postgres")
    assert sum("carol" in row["folded"] for row in before["search_texts"]) == 3  # the titles
    export = user_data.export_record(user_data.find(settings, "carol"), "test", 0)
    assert len(export["usage_records"]) == 2 and {r["action"] for r in export["audit_records"]} == {SIGN_IN, SHARE}

    removed = user_data.delete(settings, "carol")
    assert removed["chats"] == 3 and removed["messages"] == 6 and removed["shared links"] == 1
    assert removed["accounts"] == 1 and removed["usage lines"] == 2 and removed["live chat files"] == 1
    assert removed["limit counts"] == 2 and removed["login counts"] == 2
    assert removed["usage records"] == 2 and removed["audit records"] == 2

    rows = every_row(settings.chat_db, kind == "postgres")
    if kind == "sqlite":
        rows.update(every_row(str(settings.auth_db), False))
    marks = (carol_id, "carol", *threads)
    for table, table_rows in rows.items():
        for row in table_rows:
            text = json.dumps(row, default=str)
            if table == "auth_signed_out" and row["name"] == "carol":
                continue  # the sign-out mark: it refuses her tokens (and names nothing else)
            if table == "audit_records" and row["action"] == DELETE_USER:
                continue  # the operator's record of the deletion (from the command line)
            assert not any(mark in text for mark in marks), (table, row)
    assert [r["name"] for r in rows["auth_signed_out"] if r["name"] == "carol"] == ["carol"]
    assert sorted((r["action"], r["name"], r["address"]) for r in rows["audit_records"]) == [
        (DELETE_USER, "carol", "cli"), (SIGN_IN, "alice", "10.1.2.3"), (SIGN_IN_REFUSED, NOT_A_USER, "10.1.2.3")]
    assert [r["name"] for r in rows["usage_records"]] == ["alice"]
    # Everyone else's rows are untouched.
    assert _chats_of(rows, {"alice", "bob"}) == _chats_of(before, {"alice", "bob"})
    assert {r["key"] for r in rows[LIMIT_KEYS]} == {"messages:user:alice", "tokens:user:alice"}
    assert [json.loads(line)["user"] for line in settings.usage_log.read_text().splitlines()] == ["alice"]
    assert sorted(p.name for p in settings.live_chats_dir.iterdir()) == ["b2.chat"]
    with pytest.raises(user_data.NoSuchUser, match="Nothing of 'carol'.*alice, bob"):
        user_data.refuse_unknown(user_data.find(settings, "carol"), settings)


def test_revoke_sessions_is_audited_and_the_audit_command_prints_it(request, kind, tmp_path):
    settings = chat_settings(tmp_path, new_target(request, kind, tmp_path))
    chat_db.prepare_db(settings.chat_db)
    write_records(settings.chat_db, [], [(SIGN_IN, "alice")])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ERNIE_CHAT_DB": settings.chat_db,
           "ERNIE_AUTH_DB": str(settings.auth_db), "ERNIE_USERS": "alice:x"}

    def cli(*args: str) -> str:
        run = subprocess.run([sys.executable, "-m", "server.cli", *args], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return run.stdout
    cli("revoke-sessions", "alice")
    newest_first = [line.split()[2:5] for line in cli("audit", "--limit", "5").splitlines()]
    assert newest_first == [["revoke_sessions", "alice", "cli"], ["sign_in", "alice", "10.1.2.3"]]


# --- the real app: a deleted user's cookie; an export holds only the user's chats ------------------

def test_a_deleted_users_session_cookie_is_refused_by_the_app(searching_app):
    settings, _ = searching_app
    cookie = {"access_token": login(settings.app_url, "carol")}
    assert httpx.get(f"{settings.app_url}/user", cookies=cookie, timeout=30).status_code == 200
    user_data.delete(settings, "carol")
    deleted = time.time()  # the sign-out mark is at most this
    assert httpx.get(f"{settings.app_url}/user", cookies=cookie, timeout=30).status_code == 401
    # A new login works (carol is still in ERNIE_USERS): the mark refuses only older tokens. A
    # token's issue time is in whole seconds and one of the mark's own second is refused, so
    # the login comes once the clock is past that second.
    while int(time.time()) <= deleted:
        time.sleep(0.05)
    fresh = {"access_token": login(settings.app_url, "carol")}
    assert httpx.get(f"{settings.app_url}/user", cookies=fresh, timeout=30).status_code == 200


def test_an_export_holds_the_users_chats_and_no_one_elses(searching_app, tmp_path):
    settings, ids = searching_app
    out = tmp_path / "alice.zip"
    user_data.write_export(settings, "alice", out, "test")
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    with zipfile.ZipFile(io.BytesIO(out.read_bytes())) as archive:
        record = json.loads(archive.read("export.json"))
        markdown = {name: archive.read(name).decode() for name in archive.namelist() if name.endswith(".md")}
    assert {c["name"] for c in record["chats"]} == {t for t, _, _ in CHATS["alice"]}
    assert {c["id"] for c in record["chats"]} == {ids[t] for t, _, _ in CHATS["alice"]}
    for title, asked, reply in CHATS["alice"]:
        chat = next(c for c in record["chats"] if c["name"] == title)
        assert [m["output"].split("\n")[0] for m in chat["messages"]][0] == asked
        assert any(asked in text and reply in text for text in markdown.values())
    everything = json.dumps(record, ensure_ascii=False) + "".join(markdown.values())
    assert "zeppelin" not in everything and ids["Bob's secret"] not in everything
    assert "access_token" not in everything and "wonderland" not in everything
