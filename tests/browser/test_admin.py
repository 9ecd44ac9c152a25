"""The admin page in a real Chromium: a chat titled with a script shows as text; axe-core finds
no serious or critical accessibility violation on it."""

from __future__ import annotations

import re


from tests.support.accessibility import violations
from tests.support.screenshots import screenshot_path
from tests.support.admin import admin_json, USERS, XSS


def test_the_page_in_a_browser_shows_a_hostile_title_as_text(chatted, browser, tmp_path):  # noqa: F811
    apps, tokens, _ = chatted
    settings = apps[0]
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
        assert violations(page) == []
        if "chats.db" in str(settings.chat_db):  # one picture, of the SQLite run
            page.screenshot(path=screenshot_path("admin.png", tmp_path))
    finally:
        context.close()
