"""The admin page (app/pages/admin_page.py, app/pages/admin_figures.py): who reaches it, and that its
figures are those of real chats, on SQLite and on PostgreSQL, in a real Chromium too."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.auth.auth_sessions import Sessions, is_admin
from app.pages.admin_figures import MAX_DAYS, BadDays, BusyChat, Day, Report, UserDay, parse_days, sum_usage
from app.pages.admin_page import page_html
from server.auth_store import open_store
from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.chat_socket import ChatSession
from server.passwords import hash_password
from server.settings import SettingsError, load_settings
from server.stack.processes import free_port
from tests.screenshots import screenshot_path
from tests import postgres
from tests.conftest import start_app
from tests.test_browser import browser  # noqa: F401 (a fixture)

USERS = {"alice": "wonderland", "bob": "builder", "carol": "sweet"}
REPLY_TOKENS = 24  # every reply runs to it: ignore_eos
# A chat's title is its first message: anyone's text, on the admin's page.
XSS = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
TOO_LONG = "lorem ipsum dolor " * 2000  # over the test engine's 4,096-token window
FIGURES = re.compile(r"(\d+) prompt \+ (\d+) reply tokens")


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


def test_the_page_escapes_names_and_titles():
    hostile = '<script>alert("x")</script>'
    figures = Report([Day("2026-12-02", [UserDay(hostile, chats=1, messages=1)], {"<b>": 1})],
                     [BusyChat(XSS, hostile, 1, "2026-12-02T10:00:00Z")], saved_chats=True)
    page = page_html("en", figures, 1)
    assert "<script>" not in page and "<img" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


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


# --- a real app, real chats ------------------------------------------------------------

def login(url: str, user: str) -> str:
    response = httpx.post(f"{url}/login", data={"username": user, "password": USERS[user]}, timeout=60)
    assert response.status_code == 200, response.text
    return response.cookies["access_token"]


async def chat(url: str, token: str, messages: list[str]) -> list[str]:
    """One chat of several messages; the replies as the user saw them."""
    session = ChatSession(SessionRecord(0, "", messages[0]))
    replies = []
    try:
        assert await session.open(url, headers={"Cookie": f"access_token={token}"}), session.record.error
        for message in messages:
            session.next_turn(message)
            await session.ask()
            if session.record.final is not None:
                replies.append(session.record.final)
    finally:
        await session.close()
    return replies


@pytest.fixture(scope="module")
def database():
    yield from postgres.start(free_port())


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def chatted(request, engine, tmp_path_factory):
    """An app with login (alice the admin) and saved chats, after bob's and carol's chats:
    (settings, the tokens, the replies each user saw)."""
    engine_settings, _ = engine
    tmp = tmp_path_factory.mktemp(f"admin-{request.param}")
    chat_db = tmp / "chats.db" if request.param == "sqlite" else request.getfixturevalue("database")
    users = ",".join(f"{n}:{hash_password(p, rounds=4)}" for n, p in USERS.items())
    for settings in start_app(tmp, engine_url=engine_settings.engine_base_url, ignore_eos=True,
                              max_tokens=REPLY_TOKENS, chat_db=chat_db, users=users, admins="alice",
                              usage_log=tmp / "usage.jsonl"):
        url = settings.app_url
        tokens = {name: login(url, name) for name in USERS}

        async def chats():
            bob = await chat(url, tokens["bob"], ["hello there", "and again"])
            bob += await chat(url, tokens["bob"], ["a second chat"])
            carol = await chat(url, tokens["carol"], [XSS, TOO_LONG])
            return {"bob": bob, "carol": carol}
        # A thread of its own: Playwright's sync API holds this thread's event loop.
        with ThreadPoolExecutor(1) as pool:
            replies = pool.submit(asyncio.run, chats()).result()
        yield settings, tokens, replies


def admin_json(settings, token, days="14") -> dict:
    """The figures once every message is saved: Chainlit writes steps in tasks of their own."""
    deadline = time.monotonic() + 30
    while True:
        response = httpx.get(f"{settings.app_url}/admin.json", params={"days": days},
                             cookies={"access_token": token}, timeout=30)
        assert response.status_code == 200, response.text
        figures = response.json()
        if figures["days"][0]["messages"] >= 5 or time.monotonic() > deadline:
            return figures
        time.sleep(0.5)


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


def test_the_page_in_a_browser_shows_a_hostile_title_as_text(chatted, browser, tmp_path):  # noqa: F811
    settings, tokens, _ = chatted
    admin_json(settings, tokens["alice"])  # every message saved
    context = browser.new_context(viewport={"width": 1000, "height": 700})
    try:
        page = context.new_page()
        page.goto(f"{settings.app_url}/login")  # the chat's own login form
        page.locator("#email").fill("alice")
        page.locator("#password").fill(USERS["alice"])
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/$"), timeout=30_000)
        response = page.goto(f"{settings.app_url}/admin?days=7")
        assert response.status == 200
        assert "img-src 'self'" in response.headers["content-security-policy"]
        assert page.title() == "ernie-chat admin", "a script from the title ran"
        assert page.locator("table img, table script").count() == 0
        assert page.get_by_text(XSS, exact=True).count() == 1  # shown as the text it is
        assert page.locator("tbody tr").first.locator("td").nth(2).inner_text() == "3"  # chats today
        if "chats.db" in str(settings.chat_db):  # one picture, of the SQLite run
            page.screenshot(path=screenshot_path("admin.png", tmp_path))
    finally:
        context.close()
