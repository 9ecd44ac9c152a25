"""`ernie-chat qa-load --login`: chats on the real app with login and saved chats (Chainlit, the
session's CPU vLLM, demo model), in both modes and from client processes."""

from __future__ import annotations

import json


from server import cli
from server.loadtest.lib import login

USER, PASSWORD = "alice", "wonderland"  # conftest's saved_chats_app


# --- the real app, with login and saved chats -------------------------------------------

def test_a_wrong_password_stops_the_run_before_any_chat_opens(saved_chats_app, monkeypatch, capsys):
    monkeypatch.setenv(login.PASSWORD_ENV, "not-" + PASSWORD)
    assert cli.main(["qa-load", "--url", saved_chats_app.app_url, "--login", USER, "--sessions", "2"]) == 2
    err = capsys.readouterr().err
    assert "refused the login of 'alice' (401)" in err and "qa-load" not in err.split("ERROR:")[0], err


def test_logged_in_chats_from_two_client_processes_get_their_replies(saved_chats_app, monkeypatch, capsys):
    monkeypatch.setenv(login.PASSWORD_ENV, PASSWORD)
    code = cli.main(["qa-load", "--url", saved_chats_app.app_url, "--login", USER, "--sessions", "4",
                     "--processes", "2", "--timeout-s", "120", "--json"])
    result = json.loads(capsys.readouterr().out)
    s = result["summary"]
    unfinished = [c for c in result["sessions"] if not c["complete"]]
    assert code == 0 and (s["complete"], s["crossed"], s["errors"]) == (4, 0, 0), (s, unfinished)
    # Each chat is saved in a thread of its own: the app knew the user.
    assert len({c["thread_id"] for c in result["sessions"]} - {""}) == 4


def test_logged_in_users_chat_for_their_turns(saved_chats_app, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(login.PASSWORD_ENV, PASSWORD)
    code = cli.main(["qa-load", "--url", saved_chats_app.app_url, "--login", USER, "--users", "2",
                     "--turns", "2", "--think-s", "0.2", "--ramp-s", "0.5", "--reply-timeout-s", "120",
                     "--out", str(tmp_path), "--no-plots"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == 0, capsys.readouterr()
    assert summary["summary"]["ok"], summary["summary"]
