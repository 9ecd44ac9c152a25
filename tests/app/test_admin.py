"""The admin page on a real app with real chats (app/pages/admin_page.py, app/pages/admin_figures.py): who
reaches it, and that its figures are those of the chats, on SQLite and on PostgreSQL."""

from __future__ import annotations

import datetime as dt
import re

import httpx

from tests.support.admin import admin_json, REPLY_TOKENS, XSS
FIGURES = re.compile(r"(\d+) prompt \+ (\d+) reply tokens")


def test_the_admin_sees_each_users_chats_messages_tokens_and_errors(chatted):
    settings, tokens, replies = chatted
    figures = admin_json(settings, tokens["alice"])
    today = figures["days"][0]
    assert today["day"] == dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert len(figures["days"]) == 14 and figures["saved_chats"]
    per_user = {u["user"]: u for u in today["per_user"]}
    assert set(per_user) == {"bob", "carol"} and today["users"] == 2
    seen = {name: [tuple(map(int, FIGURES.search(r).groups())) for r in rs] for name, rs in replies.items()}
    assert len(seen["bob"]) == 3 and len(seen["carol"]) == 1  # carol's second message was too long
    for name, chats, messages, errors in (("bob", 2, 3, 0), ("carol", 1, 2, 1)):
        row = per_user[name]
        assert (row["chats"], row["messages"], row["errors"]) == (chats, messages, errors), name
        assert row["replies"] == len(seen[name])
        assert row["prompt_tokens"] == sum(p for p, _ in seen[name]) > 0
        assert row["reply_tokens"] == sum(c for _, c in seen[name]) == REPLY_TOKENS * len(seen[name])
    assert (today["chats"], today["messages"], today["replies"]) == (3, 5, 4)
    assert today["errors"] == {"too_long": 1}
    busiest = {c["title"]: c for c in figures["busiest_chats"]}
    assert busiest[XSS]["user"] == "carol" and busiest[XSS]["messages"] == 2
    assert all(d["messages"] == 0 and d["per_user"] == [] for d in figures["days"][1:])
    assert len(admin_json(settings, tokens["alice"], "1")["days"]) == 1


def test_others_are_refused_with_a_reason(chatted):
    settings, tokens, _ = chatted
    url = settings.app_url
    for path in ("/admin", "/admin.json"):
        bob = httpx.get(url + path, cookies={"access_token": tokens["bob"]}, timeout=30)
        assert bob.status_code == 403 and "(bob) is not an admin" in bob.text
        anonymous = httpx.get(url + path, timeout=30)
        assert anonymous.status_code == 401 and "log in first" in anonymous.text
        forged = httpx.get(url + path, cookies={"access_token": tokens["bob"][:-4] + "AAAA"}, timeout=30)
        assert forged.status_code == 401
    assert 'href="/login"' in httpx.get(url + "/admin", timeout=30).text
    bad = httpx.get(url + "/admin.json?days=1000", cookies={"access_token": tokens["alice"]}, timeout=30)
    assert bad.status_code == 400 and "from 1 to 366" in bad.json()["detail"]


def test_without_login_there_is_no_admin_page(app_without_engine):
    for path in ("/admin", "/admin.json"):
        response = httpx.get(app_without_engine.app_url + path, timeout=30)
        assert response.status_code == 404 and "login is off" in response.text
