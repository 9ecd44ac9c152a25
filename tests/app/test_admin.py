"""The admin page on a real app with real chats (app/pages/admin_page.py, app/pages/admin_figures.py): who
reaches it, and that its figures are those of the chats, on SQLite and on PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
import re

import httpx

from server.chat_records import NOT_A_USER
from tests.support.admin import admin_json, login, REPLY_TOKENS, XSS
FIGURES = re.compile(r"(\d+) prompt \+ (\d+) reply tokens")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PASSWORD_AS_NAME = "hunter2-typed-into-the-name-field"


def test_the_admin_sees_each_users_chats_messages_tokens_and_errors(chatted):
    apps, tokens, replies = chatted
    figures = admin_json(apps[0], tokens["alice"])
    today = figures["days"][0]
    assert today["day"] == dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert len(figures["days"]) == 14 and figures["saved_chats"]
    per_user = {u["user"]: u for u in today["per_user"]}
    assert set(per_user) == {"bob", "carol"} and today["users"] == 2
    seen = {name: [tuple(map(int, FIGURES.search(r).groups())) for r in rs] for name, rs in replies.items()}
    assert len(seen["bob"]) == 3 and len(seen["carol"]) == 1  # carol's second message was too long
    for name, chats, messages, errors in (("bob", 2, 5, 0), ("carol", 1, 2, 1)):  # bob's 2 commands
        row = per_user[name]
        assert (row["chats"], row["messages"], row["errors"]) == (chats, messages, errors), name
        assert row["replies"] == len(seen[name])
        assert row["prompt_tokens"] == sum(p for p, _ in seen[name]) > 0
        assert row["reply_tokens"] == sum(c for _, c in seen[name]) == REPLY_TOKENS * len(seen[name])
    assert (today["chats"], today["messages"], today["replies"]) == (3, 7, 4)
    assert today["errors"] == {"too_long": 1}
    busiest = {c["title"]: c for c in figures["busiest_chats"]}
    assert busiest[XSS]["user"] == "carol" and busiest[XSS]["messages"] == 2
    assert all(d["messages"] == 0 and d["per_user"] == [] for d in figures["days"][1:])
    assert len(admin_json(apps[0], tokens["alice"], "1")["days"]) == 1
    # Every app reads the same database: on PostgreSQL carol chatted on the second app, whose
    # usage log is its own, and each app's figures are everyone's.
    assert [admin_json(app, tokens["alice"])["days"] for app in apps] == [figures["days"]] * len(apps)


def test_the_audit_records_who_signed_in_shared_and_looked_with_their_address(chatted):
    apps, tokens, _ = chatted
    url = apps[-1].app_url
    # Through a proxy the app trusts (loopback), whose X-Forwarded-For names the client.
    proxied = {"x-forwarded-for": "198.51.100.7"}
    for name, password in (("bob", "not his password"), (PASSWORD_AS_NAME, "x")):
        refused = httpx.post(f"{url}/login", data={"username": name, "password": password},
                             headers=proxied, timeout=60)
        assert refused.status_code == 401
    leaving = login(url, "alice")
    assert httpx.post(f"{url}/logout", cookies={"access_token": leaving}, timeout=30).status_code == 200
    wanted = {("sign_in", "bob"), ("sign_in", "carol"), ("sign_in_refused", "bob"),
              ("sign_in_refused", NOT_A_USER), ("share", "bob"), ("unshare", "bob"),
              ("sign_out", "alice"), ("admin_view", "alice")}
    figures = admin_json(apps[0], tokens["alice"], until=lambda f: wanted <= {(a["action"], a["name"]) for a in f["audit"]})
    audit = figures["audit"]
    assert wanted <= {(a["action"], a["name"]) for a in audit}, audit
    assert [a["at"] for a in audit] == sorted((a["at"] for a in audit), reverse=True)  # newest first
    assert all(a["at"][:10] == figures["days"][0]["day"] for a in audit)
    refusals = [a for a in audit if a["action"] == "sign_in_refused"]
    assert {(a["address"], a["detail"]) for a in refusals} == {("198.51.100.7", "password")}
    assert {a["address"] for a in audit if a["action"] != "sign_in_refused"} == {"127.0.0.1"}
    shared = {a["detail"] for a in audit if a["action"] in ("share", "unshare")}
    assert len(shared) == 1 and UUID.fullmatch(shared.pop())  # the chat's id, never its text
    recorded = json.dumps(audit)
    assert PASSWORD_AS_NAME not in recorded and "not his password" not in recorded
    assert not any(text in recorded for text in ("hello there", "and again", "a second chat", "lorem"))
    # The page shows them too.
    page = httpx.get(f"{url}/admin", cookies={"access_token": tokens["alice"]}, timeout=30).text
    assert 'id="audit"' in page and "198.51.100.7" in page and "sign_in_refused" in page


def test_others_are_refused_with_a_reason(chatted):
    apps, tokens, _ = chatted
    url = apps[0].app_url
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
