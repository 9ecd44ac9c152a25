"""Searching saved chats from the sidebar (app/kept/chat_search.py): the matching, then the real
app's ``/project/threads`` with a login cookie on SQLite and on PostgreSQL (another user's
words, a forged ``userId``, SQL wildcards, an over-long query), then Chainlit's search box
in a real Chromium.

The chats are written into the app's database through Chainlit's own data layer, as the
chat writes them (a reply with its figures line): searching needs no engine."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.kept.chat_search import MAX_QUERY_CHARS, SearchTooLong, matches, page, query_words, searched_texts
from app.kept.saved_chats import data_layer
from app.texts import FIGURES_MARK, TEXTS
from chainlit.types import Pagination
from server import chat_db
from server.stack.processes import free_port
from tests.screenshots import screenshot_path
from tests import postgres
from tests.conftest import start_app
from tests.test_admin import USERS, login
from tests.test_browser import browser, page_factory  # noqa: F401 (fixtures)

FIGURES = "120 ms to first token · 10.0 tok/s · 20 prompt + 11 reply tokens*"
# Each user's chats: (title, what the user wrote, the reply).
CHATS = {
    "alice": [
        ("Apricot jam", "How long do I boil apricots?", "About twenty minutes, stirring."),
        ("Trip planning", "Where to go in Kyoto?", "The temples at dawn; the ＥＲＮＩＥ museum too."),
        ("机器学习", "什么是深度学习？", "深度学习是机器学习的一个分支。"),
        ("Discounts", "Is 50% off a good deal?", "It depends on the_price before."),
    ],
    "bob": [("Bob's secret", "my zeppelin password", "Keep your zeppelin password private.")],
}


# --- the matching ------------------------------------------------------------------------

def test_every_word_must_match_in_any_order_case_and_width_folded():
    texts = ["Trip planning", "Where to go in Kyoto?", "The ＥＲＮＩＥ museum."]
    assert matches(query_words("kyoto TRIP"), texts)
    assert matches(query_words("ernie"), texts) and matches(query_words("ＫＹＯＴＯ"), texts)
    assert not matches(query_words("kyoto paris"), texts)  # every word, not any
    assert matches(query_words("STRASSE"), ["Straße"])  # case folding, not just lower()
    assert matches(query_words("   "), texts)  # nothing asked: everything


def test_chinese_is_found_inside_text_without_spaces():
    texts = ["机器学习", "深度学习是机器学习的一个分支。"]
    assert matches(query_words("分支"), texts) and matches(query_words("深度 机器"), texts)
    assert not matches(query_words("分支 猫"), texts)


def test_wildcards_are_only_themselves():
    assert matches(query_words("50%"), ["Is 50% off?"])
    assert not matches(query_words("%"), ["no percent here"])
    assert not matches(query_words("_"), ["no underscore"])
    assert not matches(query_words("a_c"), ["abc"])


def test_titles_messages_and_replies_are_searched_not_figures_or_notices():
    thread = {"name": "Apricot jam", "steps": [
        {"type": "assistant_message", "output": "Hello, welcome", "metadata": '{"kind": "welcome"}'},
        {"type": "user_message", "output": "How long?", "metadata": "{}"},
        {"type": "assistant_message", "output": "Twenty minutes" + FIGURES_MARK + FIGURES,
         "metadata": {"kind": "reply"}},
    ]}
    texts = searched_texts(thread)
    assert texts == ["Apricot jam", "How long?", "Twenty minutes"]
    assert matches(query_words("jam long twenty"), texts)
    assert not matches(query_words("tok/s"), texts) and not matches(query_words("welcome"), texts)


def test_a_query_over_the_limit_is_refused_and_pages_follow_the_cursor():
    assert query_words("x" * MAX_QUERY_CHARS) == ["x" * MAX_QUERY_CHARS]
    with pytest.raises(SearchTooLong):
        query_words("x" * (MAX_QUERY_CHARS + 1))
    threads = [{"id": str(n)} for n in range(5)]
    first = page(threads, Pagination(first=2))
    assert [t["id"] for t in first.data] == ["0", "1"] and first.pageInfo.hasNextPage
    last = page(threads, Pagination(first=2, cursor="3"))
    assert [t["id"] for t in last.data] == ["4"] and not last.pageInfo.hasNextPage


# --- the real app, through HTTP -------------------------------------------------------------

async def write_chats(target) -> dict[str, str]:
    """The users' chats, as the chat saves them; their ids by title."""
    from chainlit.user import User

    layer = data_layer(target)
    # Without the chat's websocket session there is no Chainlit context: the method itself,
    # not its wrapper that waits for the session's first message.
    create_step = type(layer).create_step.__wrapped__
    ids = {}
    try:
        for name, chats in CHATS.items():
            user = await layer.create_user(User(identifier=name))
            for title, asked, reply in chats:
                thread = ids[title] = str(uuid.uuid4())
                await layer.update_thread(thread, name=title, user_id=user.id)
                for n, (kind, output, metadata) in enumerate((
                        ("user_message", asked, {}),
                        ("assistant_message", reply + FIGURES_MARK + FIGURES, {"kind": "reply"}))):
                    at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=n)).isoformat()
                    await create_step(layer, {"id": str(uuid.uuid4()), "name": name, "type": kind,
                                              "threadId": thread, "output": output, "metadata": metadata,
                                              "streaming": False, "createdAt": at})
    finally:
        await layer.engine.dispose()
    return ids


@pytest.fixture(scope="module")
def database():
    yield from postgres.start(free_port())


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def searching_app(request, tmp_path_factory):
    """The app with login and saved chats (no engine: searching needs none): (settings, ids)."""
    tmp = tmp_path_factory.mktemp(f"search-{request.param}")
    target = str(tmp / "chats.db") if request.param == "sqlite" else request.getfixturevalue("database")
    chat_db.prepare_db(target)
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API may hold this thread's event loop
        ids = pool.submit(asyncio.run, write_chats(target)).result()
    users = ",".join(f"{n}:{p}" for n, p in USERS.items())
    for settings in start_app(tmp, engine_url=f"http://127.0.0.1:{free_port()}", chat_db=target, users=users):
        yield settings, ids


def found(settings, user: str, search: str, **filters) -> httpx.Response:
    return httpx.post(f"{settings.app_url}/project/threads", timeout=30,
                      cookies={"access_token": login(settings.app_url, user)},
                      headers={"Accept-Language": filters.pop("lang", "en")},
                      json={"pagination": {"first": 20}, "filter": {"search": search, **filters}})


def titles(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {t["name"] for t in response.json()["data"]}


def test_the_search_finds_own_chats_by_every_word_in_titles_and_messages(searching_app):
    settings, _ = searching_app
    assert titles(found(settings, "alice", "")) == {t for t, _, _ in CHATS["alice"]}
    assert titles(found(settings, "alice", "KYOTO ernie")) == {"Trip planning"}
    assert titles(found(settings, "alice", "apricots twenty")) == {"Apricot jam"}
    assert titles(found(settings, "alice", "分支 深度")) == {"机器学习"}
    assert titles(found(settings, "alice", "kyoto apricots")) == set()
    assert titles(found(settings, "alice", "tok/s")) == set()  # only the figures line has it


def test_another_users_chat_is_never_found_even_with_a_forged_user_id(searching_app):
    settings, ids = searching_app
    assert titles(found(settings, "alice", "zeppelin")) == set()
    assert titles(found(settings, "bob", "zeppelin")) == {"Bob's secret"}
    bobs = found(settings, "bob", "").json()["data"][0]["userId"]
    assert titles(found(settings, "alice", "zeppelin", userId=bobs)) == set()
    assert titles(found(settings, "alice", "", userId=bobs)) == {t for t, _, _ in CHATS["alice"]}
    forged = {"pagination": {"first": 20}, "filter": {"search": "zeppelin", "userId": bobs}}
    anonymous = httpx.post(f"{settings.app_url}/project/threads", json=forged, timeout=30)
    assert anonymous.status_code == 401 and ids["Bob's secret"] not in anonymous.text


def test_sql_wildcards_are_literal_and_a_long_query_is_refused(searching_app):
    settings, _ = searching_app
    assert titles(found(settings, "alice", "%")) == {"Discounts"}  # only the chat with a real %
    assert titles(found(settings, "alice", "_")) == {"Discounts"}
    assert titles(found(settings, "alice", "a%o")) == set()
    assert titles(found(settings, "alice", "' OR 1=1 --")) == set()
    for lang in ("en", "zh"):
        refused = found(settings, "alice", "x" * (MAX_QUERY_CHARS + 1), lang=lang)
        assert refused.status_code == 400
        assert refused.json()["detail"] == TEXTS[lang]["search_too_long"].format(limit=MAX_QUERY_CHARS)


@pytest.mark.browser
def test_the_sidebar_search_shows_only_the_matching_chat(searching_app, page_factory, tmp_path):  # noqa: F811
    settings, ids = searching_app
    page = page_factory(settings.app_url)
    page.locator("#email").fill("alice")
    page.locator("#password").fill(USERS["alice"])
    page.keyboard.press("Enter")
    page.get_by_text("Apricot jam").first.wait_for(timeout=30_000)  # the sidebar's list
    page.keyboard.press("Control+k")
    box = page.get_by_role("dialog")
    box.locator("input").fill("深度")
    box.get_by_text("机器学习").wait_for(timeout=30_000)
    box.get_by_text("Apricot jam").wait_for(state="detached", timeout=30_000)
    box.locator("input").fill("ｋｙｏｔｏ TEMPLES")
    box.get_by_text("Trip planning").wait_for(timeout=30_000)
    box.get_by_text("机器学习").wait_for(state="detached", timeout=30_000)
    assert box.get_by_text(re.compile("Apricot|Discounts|Bob")).count() == 0
    if "chats.db" in str(settings.chat_db):
        box.screenshot(path=screenshot_path("search.png", tmp_path))
    box.locator("input").fill("x" * (MAX_QUERY_CHARS + 1))  # Chainlit shows the refusal's text
    refusal = TEXTS["en"]["search_too_long"].format(limit=MAX_QUERY_CHARS)
    page.get_by_text(refusal).first.wait_for(timeout=30_000)
    box.locator("input").fill("kyoto")
    box.get_by_text("Trip planning").click()
    page.wait_for_url(re.compile(rf"/thread/{ids['Trip planning']}$"), timeout=30_000)
