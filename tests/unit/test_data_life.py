"""The pure parts of backups, restores and one user's data: the manifest and its checks, the
folders refused, a PostgreSQL URL's password kept off command lines, the export's contents, the
usage log rewritten, a running `up` refused; the CLI's refusals."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys

import pytest

from server import cli
from server.data_life import DataLifeError, NoSuchUser, backup, manifest, restore, user_data
from server.data_life.database import pg_connection
from server.data_life.places import refuse_while_up, running_up
from server.settings import Settings

pytestmark = pytest.mark.usefixtures("clean_env")


def settings_in(tmp_path, **values) -> Settings:
    base = dict(auth_db=tmp_path / "auth.db", usage_log=tmp_path / "usage.jsonl",
                log_file=tmp_path / "run" / "llm.log", live_chats_dir=tmp_path / "live")
    return Settings(_env_file=None, **{**base, **values})


def a_backup(tmp_path):
    folder = tmp_path / "backup"
    folder.mkdir(parents=True)
    (folder / "usage.jsonl").write_text('{"user": "a"}\n')
    entries = [manifest.entry(folder, "usage.jsonl")]
    (folder / manifest.NAME).write_text(json.dumps(manifest.manifest(entries, "1.2.3", "off", 0, 1)))
    return folder


# --- the manifest ------------------------------------------------------------------------------

def test_the_manifest_names_each_file_with_its_size_and_checksum(tmp_path):
    folder = a_backup(tmp_path)
    data = manifest.read(folder)
    assert data["version"] == "1.2.3" and data["started"] == "1970-01-01T00:00:00Z"
    assert data["files"] == [{"name": "usage.jsonl", "what": manifest.WHAT["usage.jsonl"], "bytes": 14,
                              "sha256": hashlib.sha256(b'{"user": "a"}\n').hexdigest()}]
    assert manifest.verify(folder, data) == []


def test_sizes_are_said_in_the_unit_that_fits():
    assert [manifest.size_text(n) for n in (0, 1023, 65536, 3 * 2**20 + 2**19, 5 * 2**30)] == [
        "0 bytes", "1,023 bytes", "64.0 KiB", "3.5 MiB", "5.0 GiB"]


@pytest.mark.parametrize("change, problem", [
    (lambda f: (f / "usage.jsonl").unlink(), "usage.jsonl: missing"),
    (lambda f: (f / "usage.jsonl").write_text('{"user": "b"}\n'), "SHA-256 differs"),
    (lambda f: (f / "usage.jsonl").write_text("{}\n"), "3 bytes, the manifest says 14"),
])
def test_a_changed_backup_fails_its_checks(tmp_path, change, problem):
    folder = a_backup(tmp_path)
    change(folder)
    assert problem in " ".join(manifest.verify(folder, manifest.read(folder)))


def test_a_manifest_naming_a_file_outside_the_backup_is_refused(tmp_path):
    folder = a_backup(tmp_path)
    data = manifest.read(folder)
    data["files"].append({"name": "../.env", "bytes": 1, "sha256": "x"})
    assert manifest.verify(folder, data) == ["'../.env': not a part of a backup"]


def test_a_folder_without_a_manifest_is_not_a_backup(tmp_path):
    with pytest.raises(DataLifeError, match="no manifest.json: it is not a folder"):
        manifest.read(tmp_path)
    with pytest.raises(DataLifeError, match="No backup folder at"):
        manifest.read(tmp_path / "nowhere")
    (tmp_path / manifest.NAME).write_text("{not json")
    with pytest.raises(DataLifeError, match="not valid JSON"):
        manifest.read(tmp_path)


# --- backup ------------------------------------------------------------------------------------

def test_a_backup_goes_into_a_new_or_empty_folder_only(tmp_path):
    assert backup.empty_folder(tmp_path / "new" / "b") is True
    assert oct((tmp_path / "new" / "b").stat().st_mode & 0o777) == "0o700"
    assert backup.empty_folder(tmp_path / "new" / "b") is False  # empty: fine
    (tmp_path / "new" / "b" / "x").write_text("")
    with pytest.raises(DataLifeError, match="is not empty"):
        backup.empty_folder(tmp_path / "new" / "b")
    with pytest.raises(DataLifeError, match="is a file, not a folder"):
        backup.empty_folder(tmp_path / "new" / "b" / "x")


def test_a_backup_of_sqlite_files_and_the_usage_log_is_private_and_whole(tmp_path):
    chats = tmp_path / "chats.db"
    with sqlite3.connect(chats) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE threads (id TEXT)")
        db.execute("INSERT INTO threads VALUES ('t1')")
    (tmp_path / "usage.jsonl").write_text('{"user": "a"}\n{"user": "b"')  # a line being written
    settings = settings_in(tmp_path, chat_db=str(chats), users="a:b")
    lines = []
    data = backup.take(settings, tmp_path / "b", "9.9", say=lines.append)
    assert [f["name"] for f in data["files"]] == ["chats.db", "usage.jsonl"]
    assert data["chat_db"] == "sqlite" and data["version"] == "9.9"
    assert (tmp_path / "b" / "usage.jsonl").read_text() == '{"user": "a"}\n'
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["chats.db", "manifest.json", "usage.jsonl"]
    assert {oct(p.stat().st_mode & 0o777) for p in (tmp_path / "b").iterdir()} == {"0o600"}
    with sqlite3.connect(tmp_path / "b" / "chats.db") as copy:
        assert copy.execute("SELECT id FROM threads").fetchall() == [("t1",)]
        assert copy.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert len(lines) == 2 and lines[0].startswith("[backup] chats.db: ")


def test_nothing_to_back_up_and_a_missing_chat_file_are_said_so(tmp_path):
    with pytest.raises(DataLifeError, match="Nothing to back up"):
        backup.take(settings_in(tmp_path), tmp_path / "b", "1")
    with pytest.raises(DataLifeError, match="does not exist: check the setting"):
        backup.take(settings_in(tmp_path, chat_db=str(tmp_path / "no.db"), users="a:b"), tmp_path / "b", "1")
    assert not (tmp_path / "b").exists()


def test_a_postgres_password_travels_in_the_environment_not_on_the_command_line():
    assert pg_connection("postgresql+asyncpg://chat:s%40cret@db.example:5433/chats?sslmode=require") == (
        "postgresql://chat@db.example:5433/chats?sslmode=require", {"PGPASSWORD": "s@cret"})
    assert pg_connection("postgres://chat@[::1]/chats") == ("postgresql://chat@[::1]/chats", {})


# --- restore -----------------------------------------------------------------------------------

def test_a_restore_refuses_while_up_runs(tmp_path):
    settings = settings_in(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "supervisor.json").write_text(json.dumps({"pid": os.getpid()}))
    assert running_up(settings) == os.getpid()
    with pytest.raises(DataLifeError, match=rf"`ernie-chat up` runs \(pid {os.getpid()}.*Stop it first"):
        restore.put_back(settings, a_backup(tmp_path))
    assert not (tmp_path / "usage.jsonl").exists()
    (tmp_path / "run" / "supervisor.json").write_text(json.dumps({"pid": 2**22 + 1}))  # no such process
    refuse_while_up(settings, "a restore")


def test_a_restore_refuses_another_kind_of_database_and_data_in_the_way(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "chats.pgdump").write_bytes(b"dump")
    (folder / manifest.NAME).write_text(json.dumps(manifest.manifest(
        [manifest.entry(folder, "chats.pgdump")], "1", "postgresql", 0, 1)))
    with pytest.raises(DataLifeError, match="ERNIE_CHAT_DB is unset: set it"):
        restore.put_back(settings_in(tmp_path), folder)
    with pytest.raises(DataLifeError, match="saved chats are PostgreSQL, ERNIE_CHAT_DB is SQLite"):
        restore.put_back(settings_in(tmp_path, chat_db=str(tmp_path / "c.db"), users="a:b"), folder)
    (tmp_path / "usage.jsonl").write_text("{}\n")
    other = a_backup(tmp_path / "other")
    with pytest.raises(DataLifeError, match=r"(?s)usage.jsonl \(3 bytes\).*--force"):
        restore.put_back(settings_in(tmp_path), other)
    restore.put_back(settings_in(tmp_path), other, force=True, say=lambda _: None)
    assert (tmp_path / "usage.jsonl").read_text() == '{"user": "a"}\n'
    assert oct((tmp_path / "usage.jsonl").stat().st_mode & 0o777) == "0o600"


# --- one user's data ---------------------------------------------------------------------------

def test_the_keys_of_a_user_in_the_login_store():
    assert user_data.limit_keys("bob") == ["messages:user:bob", "tokens:user:bob"]
    assert user_data.is_login_key("pair:addr:10.0.0.1:bob", "bob")
    assert user_data.is_login_key("pair:addr:2001:db8::/64:bob", "bob")
    assert user_data.is_login_key("newdev:bob", "bob")
    assert not user_data.is_login_key("pair:addr:10.0.0.1:bobby", "bob")
    assert not user_data.is_login_key("device:abc", "bob")
    assert not user_data.is_login_key("addr:10.0.0.1", "bob")


def test_an_export_leaves_out_what_lets_its_holder_in():
    found = user_data.Found(
        "bob",
        accounts=[{"id": "u1", "identifier": "bob", "metadata": json.dumps(
            {"provider": "password", "key": "fingerprint", "login": "abc", "role": "admin"})}],
        chats=[{"id": "t1", "name": "Plans", "createdAt": "2026-01-01", "metadata": "{}",
                "messages": [{"type": "user_message", "output": "hi", "createdAt": "a"},
                             {"type": "run", "output": "internal", "createdAt": "b"},
                             {"type": "assistant_message", "output": "hello", "createdAt": "c"}],
                "elements": [], "feedback": []}],
        shares=[{"token": "SECRET-LINK", "threadId": "t1", "userIdentifier": "bob", "origin": "o"}],
        login_rows=[{"key": "pair:addr:10.0.0.1:bob", "failures": 2.0, "updated": 0.0, "ready_at": 0.0}],
        limit_rows=[{"key": "tokens:user:bob", "failures": 0, "updated": 0, "ready_at": 60.0}],
        signed_out_at=0.0, usage=[{"user": "bob", "prompt_tokens": 1}])
    record = user_data.export_record(found, "1.0", 0)
    text = json.dumps(record)
    assert "fingerprint" not in text and "SECRET-LINK" not in text and '"abc"' not in text
    assert record["account"][0]["metadata"] == {"provider": "password", "role": "admin"}
    assert record["shared_links"] == [{"threadId": "t1", "userIdentifier": "bob", "origin": "o"}]
    assert record["sessions"]["failed_login_counts"] == [
        {"from": "addr:10.0.0.1", "failed_logins": 2.0, "updated": "1970-01-01T00:00:00Z"}]
    assert record["sessions"]["limit_counts"] == [{"limit": "tokens", "allowance_whole_again_at": "1970-01-01T00:01:00Z"}]
    markdown = user_data.chat_markdown(record["chats"][0])
    assert markdown.startswith("# Plans") and "hi" in markdown and "hello" in markdown
    assert "internal" not in markdown
    assert user_data.slug("Bob's plan / 机器") == "Bob-s-plan-机器"


@pytest.mark.parametrize("name", ["", " bob", "bob\n", "a\tb"])
def test_a_name_that_cannot_be_a_login_is_refused(name):
    with pytest.raises(NoSuchUser, match="is not a user name"):
        user_data.checked_name(name)


def test_the_usage_log_loses_the_users_lines_only(tmp_path):
    log = tmp_path / "usage.jsonl"
    log.write_text('{"user": "bob"}\nnot json\n{"user": "alice"}\n{"user": "bob", "error": "x"}\n{}\n')
    assert user_data.drop_usage_lines(log, "bob") == 2
    assert log.read_text() == 'not json\n{"user": "alice"}\n{}\n'
    assert user_data.drop_usage_lines(tmp_path / "none.jsonl", "bob") == 0


def test_live_chat_files_of_the_user_are_found_by_their_record(tmp_path):
    (tmp_path / "a.chat").write_text(json.dumps({"user": "bob"}))
    (tmp_path / "a.reply").write_text(json.dumps({"user": "bob"}))
    (tmp_path / "b.chat").write_text(json.dumps({"user": "alice"}))
    (tmp_path / "c.chat").write_text("broken")
    assert [p.name for p in user_data.live_chat_files(tmp_path, "bob")] == ["a.chat", "a.reply"]


# --- the command line --------------------------------------------------------------------------

def run_cli(monkeypatch, capsys, tmp_path, *argv) -> tuple[int, str]:
    for key, value in dict(ERNIE_AUTH_DB=tmp_path / "auth.db", ERNIE_USAGE_LOG=tmp_path / "usage.jsonl",
                           ERNIE_LOG_FILE=tmp_path / "run" / "llm.log",
                           ERNIE_LIVE_CHATS_DIR=tmp_path / "live").items():
        monkeypatch.setenv(key, str(value))
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def test_delete_user_without_a_terminal_asks_for_yes(monkeypatch, capsys, tmp_path):
    (tmp_path / "usage.jsonl").write_text('{"user": "bob"}\n')
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    code, err = run_cli(monkeypatch, capsys, tmp_path, "delete-user", "bob")
    assert code == 2 and "add --yes to delete without asking" in err
    assert (tmp_path / "usage.jsonl").read_text() == '{"user": "bob"}\n'
    code, err = run_cli(monkeypatch, capsys, tmp_path, "delete-user", "bob", "--yes")
    assert code == 0 and (tmp_path / "usage.jsonl").read_text() == ""


def test_delete_user_on_a_terminal_goes_on_only_when_the_name_is_typed(monkeypatch, capsys, tmp_path):
    (tmp_path / "usage.jsonl").write_text('{"user": "bob"}\n')
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "yes")
    code, _ = run_cli(monkeypatch, capsys, tmp_path, "delete-user", "bob")
    assert code == 1 and (tmp_path / "usage.jsonl").read_text() == '{"user": "bob"}\n'
    monkeypatch.setattr("builtins.input", lambda prompt: "bob")
    code, _ = run_cli(monkeypatch, capsys, tmp_path, "delete-user", "bob")
    assert code == 0 and (tmp_path / "usage.jsonl").read_text() == ""


def test_a_status_line_ticks_while_a_silent_step_runs(monkeypatch):
    lines = []
    monkeypatch.setattr(backup.StatusLine, "update", lambda self, detail: lines.append(detail))
    with backup.ticking("backup", "chats.db ...", every_s=0.001):
        while not lines:  # the step "runs" until the line has ticked
            pass
    assert lines[0] == "chats.db ..."


def test_a_missing_or_broken_chat_database_is_named_and_left_alone(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("ERNIE_USERS", "bob:x")
    monkeypatch.setenv("ERNIE_CHAT_DB", str(tmp_path / "nowhere.db"))
    code, err = run_cli(monkeypatch, capsys, tmp_path, "export-user", "bob", "--out", str(tmp_path / "b.zip"))
    assert code == 2 and f"No SQLite database at {tmp_path / 'nowhere.db'}" in err
    assert not (tmp_path / "nowhere.db").exists()
    (tmp_path / "broken.db").write_bytes(b"not a database" * 100)
    monkeypatch.setenv("ERNIE_CHAT_DB", str(tmp_path / "broken.db"))
    code, err = run_cli(monkeypatch, capsys, tmp_path, "delete-user", "bob", "--yes")
    assert code == 2 and "is not a usable SQLite database" in err
    assert (tmp_path / "broken.db").read_bytes() == b"not a database" * 100


def test_export_and_delete_of_an_unknown_user_say_so(monkeypatch, capsys, tmp_path):
    for command in ("export-user", "delete-user"):
        code, err = run_cli(monkeypatch, capsys, tmp_path, command, "nobody", "--out" if command == "export-user" else "--yes",
                            *([str(tmp_path / "x.zip")] if command == "export-user" else []))
        assert code == 2 and "Nothing of 'nobody' was found" in err
    (tmp_path / "x.zip").write_text("")
    code, err = run_cli(monkeypatch, capsys, tmp_path, "export-user", "bob", "--out", str(tmp_path / "x.zip"))
    assert code == 2 and "exists: an export never overwrites a file" in err
