"""The admin page (app/pages/admin_page.py, app/pages/admin_figures.py): who reaches it, and that its
figures are those of real chats, on SQLite and on PostgreSQL, in a real Chromium too."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from app.auth.auth_sessions import Sessions, is_admin
from app.pages.admin_figures import (MAX_DAYS, AuditRecord, BadDays, BusyChat, Day, Report, UserDay, parse_days,
                                     stored_usage_sums, sum_usage)
from app.pages.admin_page import page_html
from server import chat_records
from server.auth_store import open_store
from server.settings import SettingsError, load_settings
from tests.support.admin import XSS


# --- the parts, without a server ------------------------------------------------------

def test_days_are_bounded():
    assert parse_days(None) == 14 and parse_days("1") == 1 and parse_days(str(MAX_DAYS)) == MAX_DAYS
    for bad in ("0", str(MAX_DAYS + 1), "-3", "2.5", "x", " 7"):
        with pytest.raises(BadDays):
            parse_days(bad)


def test_usage_lines_are_summed_per_day_and_user():
    records = [
        {"time": "2026-12-01T10:00:00Z", "prompt_tokens": 10, "completion_tokens": 5, "user": "bob"},
        {"time": "2026-12-01T11:00:00Z", "prompt_tokens": 20, "completion_tokens": 7, "user": "bob"},
        {"time": "2026-12-01T12:00:00Z", "error": "too_long", "user": "bob"},
        {"time": "2026-12-02T09:00:00Z", "error": "timeout", "user": "carol"},
        {"time": "2026-12-02T09:30:00Z", "prompt_tokens": 3, "completion_tokens": 4},  # no login
        {"time": "2026-11-30T23:59:59Z", "prompt_tokens": 99, "completion_tokens": 99, "user": "bob"},
        None, {"prompt_tokens": 1, "completion_tokens": 1},  # unreadable; no time
    ]
    sums = sum_usage(records, "2026-12-01")
    bob = sums.per_user[("2026-12-01", "bob")]
    assert (bob.replies, bob.prompt_tokens, bob.reply_tokens, bob.errors) == (2, 30, 12, 1)
    assert sums.per_user[("2026-12-02", "carol")].errors == 1
    assert sums.per_user[("2026-12-02", "")].reply_tokens == 4
    assert sums.errors == {"2026-12-01": Counter(too_long=1), "2026-12-02": Counter(timeout=1)}
    assert ("2026-11-30", "bob") not in sums.per_user


def test_stored_usage_sums_are_the_same_figures_as_the_lines():
    replies = [{"day": "2026-12-01", "name": "bob", "replies": 2, "prompt_tokens": 30, "reply_tokens": 12},
               {"day": "2026-12-02", "name": "", "replies": 1, "prompt_tokens": 3, "reply_tokens": 4}]
    errors = [{"day": "2026-12-01", "name": "bob", "kind": "too_long", "errors": 1},
              {"day": "2026-12-02", "name": "carol", "kind": "timeout", "errors": 2}]
    sums = stored_usage_sums(replies, errors)
    bob = sums.per_user[("2026-12-01", "bob")]
    assert (bob.replies, bob.prompt_tokens, bob.reply_tokens, bob.errors) == (2, 30, 12, 1)
    assert sums.per_user[("2026-12-02", "carol")].errors == 2
    assert sums.per_user[("2026-12-02", "")].reply_tokens == 4
    assert sums.errors == {"2026-12-01": Counter(too_long=1), "2026-12-02": Counter(timeout=2)}


def test_a_refused_sign_in_names_only_a_user_and_records_are_bounded():
    users = {"alice": "hash"}
    assert chat_records.tried_name("alice", users) == "alice"
    # A password typed into the name field never reaches the audit.
    assert chat_records.tried_name("correct horse battery", users) == chat_records.NOT_A_USER
    row = chat_records.audit_row(chat_records.SIGN_IN, "x" * 500, None, "y" * 500)
    assert len(row["name"]) == 200 and len(row["detail"]) == 200 and row["address"] == "unknown"
    assert row["at"].endswith("+00:00")  # UTC, as the days are
    with pytest.raises(ValueError, match="not an audit action"):
        chat_records.audit_row("message", "alice", "127.0.0.1")
    statement, values = chat_records.numbered(chat_records.INSERT_AUDIT, row)
    assert "VALUES ($1, $2, $3, $4, $5)" in statement and values == list(row.values())


def test_the_page_escapes_names_and_titles():
    hostile = '<script>alert("x")</script>'
    figures = Report([Day("2026-12-02", [UserDay(hostile, chats=1, messages=1)], {"<b>": 1})],
                     [BusyChat(XSS, hostile, 1, "2026-12-02T10:00:00Z")], saved_chats=True,
                     audit=[AuditRecord("2026-12-02T10:00:00+00:00", "sign_in_refused", hostile, "<i>", XSS)])
    page = page_html("en", figures, 1)
    assert "<script>" not in page and "<img" not in page and "<b>" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "sign_in_refused" in page and "2026-12-02 10:00:00" in page


def test_a_password_login_of_an_admin_carries_the_role_and_loses_it_with_ernie_admins(tmp_path):
    store = open_store(None, tmp_path / "auth.db")
    users = {"alice": "x", "bob": "y"}
    before = Sessions(store, users, "secret", admins=frozenset({"alice"}))
    alice, bob = before.user_metadata("alice"), before.user_metadata("bob")
    assert alice["role"] == "admin" and "role" not in bob
    claims = {"identifier": "alice", "iat": 1, "metadata": alice}
    assert asyncio.run(before.refusal("token", claims)) is None
    after = Sessions(store, users, "secret", admins=frozenset())
    assert asyncio.run(after.refusal("token", claims)) == "admin role changed in ERNIE_ADMINS"
    assert is_admin(type("U", (), {"metadata": alice})()) and not is_admin(None)


@pytest.mark.usefixtures("clean_env")
def test_an_admin_must_be_a_user():
    with pytest.raises(SettingsError, match="ERNIE_ADMINS names carol, not in ERNIE_USERS"):
        load_settings(users="alice:x,bob:y", admins="alice,carol")
    assert load_settings(users="alice:x,bob:y", admins=" alice , bob").admin_names == {"alice", "bob"}
