"""Searching saved chats through the real app's ``/project/threads`` with a login cookie, on
SQLite and on PostgreSQL: another user's words, a forged ``userId``, SQL wildcards, an
over-long query.  The chats are written as the chat writes them: searching needs no engine."""

from __future__ import annotations


import httpx

from app.kept.chat_search import MAX_QUERY_CHARS
from app.texts import TEXTS
from tests.support.admin import login
from tests.support.search import CHATS


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
