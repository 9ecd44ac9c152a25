"""Saved chats in a real Chromium: Chainlit's search box (app/kept/chat_search.py), saved prompts
(app/kept/saved_prompts.py), and the personas of the app's file (ERNIE_PERSONAS_FILE)."""

from __future__ import annotations

import asyncio
import re
import time
from concurrent.futures import ThreadPoolExecutor


from app.kept.chat_search import MAX_QUERY_CHARS
from app.texts import TEXTS
from tests.support.admin import USERS
from tests.support.browser import USER, new_chat
from tests.support.screenshots import screenshot_path
from tests.support.search import starred


def alices_page(page_factory, settings):
    """The app's page with alice logged in, once the sidebar lists her chats."""
    page = page_factory(settings.app_url)
    page.locator("#email").fill("alice")
    page.locator("#password").fill(USERS["alice"])
    page.keyboard.press("Enter")
    page.get_by_text("Apricot jam").first.wait_for(timeout=30_000)
    return page


def test_the_sidebar_search_shows_only_the_matching_chat(searching_app, page_factory, tmp_path):  # noqa: F811
    settings, ids = searching_app
    page = alices_page(page_factory, settings)
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


def test_the_persona_menu_shows_exactly_the_files_personas(searching_app, page_factory):
    settings, _ = searching_app
    page = alices_page(page_factory, settings)
    page.locator("#chat-profiles").click()
    options = page.get_by_role("option")
    options.first.wait_for(timeout=30_000)
    assert options.all_inner_texts() == ["Pirate", "Poet"]  # tests/data/personas-two.toml


def test_a_starred_message_is_saved_and_goes_into_a_new_chats_composer(searching_app, page_factory):
    settings, _ = searching_app
    asked = "Where to go in Kyoto?"  # alice's message in her saved chat "Trip planning"
    page = alices_page(page_factory, settings)
    page.locator("#thread-history").get_by_text("Trip planning").first.click()
    message = page.locator(USER).filter(has_text=asked)
    message.wait_for(timeout=30_000)
    message.hover()
    message.locator(".favorite-message").click()
    deadline = time.monotonic() + 30  # the star is written after the page shows it
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API holds this thread's event loop
        while asked not in (saved := pool.submit(asyncio.run, starred(settings.chat_db, "alice")).result()):
            assert time.monotonic() < deadline, f"alice's saved prompts: {saved}"
            time.sleep(0.1)
    page.reload()  # the page's list now comes from the database alone
    new_chat(page)
    page.locator(".favorite-popover-wrapper button").click()
    page.get_by_role("option").filter(has_text=asked).click()
    page.wait_for_function("text => document.querySelector('#chat-input').value === text", arg=asked,
                           timeout=30_000)
