"""Searching saved chats from the sidebar (app/kept/chat_search.py): the matching, then the real
app's ``/project/threads`` with a login cookie on SQLite and on PostgreSQL (another user's
words, a forged ``userId``, SQL wildcards, an over-long query), then Chainlit's search box
in a real Chromium.

The chats are written into the app's database through Chainlit's own data layer, as the
chat writes them (a reply with its figures line): searching needs no engine."""

from __future__ import annotations


import pytest

from app.kept.chat_search import MAX_QUERY_CHARS, SearchTooLong, matches, page, query_words, searched_texts
from app.texts import FIGURES_MARK
from chainlit.types import Pagination
from tests.support.search import FIGURES


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
