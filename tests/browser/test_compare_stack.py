"""``/compare`` (app/conversation/compare.py) in a real Chromium with one model: it says it needs several."""

from __future__ import annotations


from tests.support.browser import open_chat, send, COLUMN


def test_with_one_model_compare_says_it_needs_several(page_factory, chat_app):
    page = open_chat(page_factory, chat_app)
    send(page, "/compare x")
    page.get_by_text("needs several models").wait_for(timeout=30_000)
    assert not page.locator(COLUMN).count()
