"""Chainlit's search box in a real Chromium, on saved chats (app/kept/chat_search.py)."""

from __future__ import annotations

import re


from app.kept.chat_search import MAX_QUERY_CHARS
from app.texts import TEXTS
from tests.support.screenshots import screenshot_path
from tests.support.admin import USERS


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
