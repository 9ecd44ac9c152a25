"""Searching saved chats from the sidebar (app/kept/chat_search.py, app/kept/search_index.py):
the matching, through the app's data layer and the search's index on a SQLite file; what is
searched of a step; the query's limit and the pages.

The chats are written through the app's data layer, as the chat writes them (a reply with its
figures line): searching needs no engine."""

from __future__ import annotations


import pytest

from app.kept.chat_search import MAX_QUERY_CHARS, SearchTooLong, page, query_words
from app.kept.search_index import like_pattern, phrase, searched_text
from app.texts import FIGURES_MARK
from chainlit.types import Pagination
from tests.support.search import FIGURES, found_by


# --- the matching ------------------------------------------------------------------------

def test_every_word_must_match_in_any_order_case_and_width_folded(tmp_path):
    chat = ("Trip planning", "Where to go in Kyoto?", "The ＥＲＮＩＥ museum.")
    assert found_by(str(tmp_path / "a.db"), chat, ["kyoto TRIP", "ernie", "ＫＹＯＴＯ", "kyoto paris"]) == [
        True, True, True, False]  # every word, not any
    # Case folding, not just lower(); nothing asked: everything.
    assert found_by(str(tmp_path / "b.db"), ("Straße", "", ""), ["STRASSE", "   "]) == [True, True]


def test_chinese_is_found_inside_text_without_spaces(tmp_path):
    chat = ("机器学习", "什么？", "深度学习是机器学习的一个分支。")
    assert found_by(str(tmp_path / "c.db"), chat, ["分支", "深度 机器", "分支 猫", "学习是机器"]) == [
        True, True, False, True]


def test_wildcards_and_query_syntax_are_only_themselves(tmp_path):
    chat = ("Sale", "Is 50% off?", 'It said "a OR b" NEAR the abc.')
    queries = ["50%", "%", "_", "a_c", '"a', "or", 'b"', "near", "a*", "^abc"]
    assert found_by(str(tmp_path / "d.db"), chat, queries) == [
        True, True, False, False, True, True, True, True, False, False]
    assert like_pattern("a_c%\\") == "%a\\_c\\%\\\\%" and phrase('say "hi"') == '"say ""hi"""'


def test_titles_messages_and_replies_are_searched_not_figures_or_notices():
    assert searched_text({"type": "assistant_message", "output": "Hello, welcome",
                          "metadata": '{"kind": "welcome"}'}) is None
    assert searched_text({"type": "user_message", "output": "How long?", "metadata": "{}"}) == "How long?"
    assert searched_text({"type": "assistant_message", "output": "Twenty minutes" + FIGURES_MARK + FIGURES,
                          "metadata": {"kind": "reply"}}) == "Twenty minutes"
    assert searched_text({"type": "run", "output": "How long?"}) is None


def test_figures_lines_are_not_found(tmp_path):
    assert found_by(str(tmp_path / "e.db"), ("Apricot jam", "How long?", "Twenty minutes"),
                    ["jam long twenty", "tok/s"]) == [True, False]


def test_a_query_over_the_limit_is_refused_and_pages_follow_the_cursor():
    assert query_words("x" * MAX_QUERY_CHARS) == ["x" * MAX_QUERY_CHARS]
    with pytest.raises(SearchTooLong):
        query_words("x" * (MAX_QUERY_CHARS + 1))
    threads = [{"id": str(n)} for n in range(5)]
    first = page(threads, Pagination(first=2))
    assert [t["id"] for t in first.data] == ["0", "1"] and first.pageInfo.hasNextPage
    last = page(threads, Pagination(first=2, cursor="3"))
    assert [t["id"] for t in last.data] == ["4"] and not last.pageInfo.hasNextPage
