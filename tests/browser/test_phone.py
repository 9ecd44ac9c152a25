"""The chat and its pages at a phone's size (390x844), in the chat's light and dark theme, and
the chat by keyboard alone, in a real Chromium against the real engine. npm's axe-core
(tests/support/accessibility.py) finds no serious or critical violation on the chat, a shared
chat's page and the live view (the admin page's: tests/browser/test_admin.py; with the saved
chats' list beside the chat: tests/browser/test_versions_browser.py).

Chainlit's own page needs public/chat.css and public/chat.js for that (names for its icon
buttons, links that stand out from their sentence); one rule on one element of its sidebar is
left out (``accessibility.CHAINLIT``, which says why).
"""

from __future__ import annotations

import pytest

from app.pages.live_page import PAGE as LIVE
from tests.support.accessibility import THEMES, background, choose_theme, is_dark, overflow, phone, violations
from tests.support.browser import (ASSISTANT, LINK, command, finished_replies, log_in, regenerate,
                                   regenerate_button)
from tests.support.screenshots import screenshot_path
from tests.support.share import decoded

STOPPED = "Stopped. The text above is kept."


def in_view(page, locator) -> bool:
    """Whether the element lies wholly on the screen: nothing of it to the sides or cut off."""
    box = locator.bounding_box()
    size = page.viewport_size
    return box is not None and box["x"] >= 0 and box["y"] >= 0 and \
        box["x"] + box["width"] <= size["width"] and box["y"] + box["height"] <= size["height"]


def fits(page, theme: str) -> None:
    """The page is in ``theme``, scrolls only up and down, and axe finds nothing serious."""
    assert is_dark(background(page)) == (theme == "dark"), (theme, background(page))
    assert overflow(page) <= 0, f"{overflow(page)} px wider than the phone"
    assert violations(page) == []


def tap(page, locator) -> None:
    """Tap what a person sees: on the screen once scrolled to, and not covered (Playwright's
    click checks that the element itself gets the tap)."""
    locator.scroll_into_view_if_needed()
    assert in_view(page, locator), locator
    locator.click()


@pytest.mark.parametrize("theme", THEMES)
def test_on_a_phone_a_reply_is_sent_and_stopped_and_the_live_view_fits(theme, browser, chat_app):
    context = phone(browser, theme)
    try:
        page = context.new_page()
        page.goto(chat_app.app_url)
        page.locator(ASSISTANT).first.wait_for(timeout=30_000)  # the welcome
        choose_theme(page, theme)
        fits(page, theme)
        page.locator("#chat-input").fill("Tell me a long story.")
        tap(page, page.locator("#chat-submit"))
        page.wait_for_function(f"document.querySelectorAll('{ASSISTANT}')[1]?.innerText.length > 20",
                               timeout=60_000)
        tap(page, page.locator("#stop-button"))
        page.get_by_text(STOPPED).wait_for(timeout=60_000)
        assert "tok/s" not in page.locator(ASSISTANT).nth(1).inner_text(), "Stop did not stop the reply"
        fits(page, theme)  # with the stopped reply, its notice and Regenerate

        live = context.new_page()
        live.goto(f"{chat_app.app_url}{LIVE}")
        live.wait_for_function("document.querySelector('#chats').dataset.value >= 1", timeout=20_000)
        assert is_dark(background(live)), "the live view is black in either theme (a projector's)"
        assert overflow(live) <= 0 and violations(live) == []
        assert in_view(live, live.locator("#tokens .value"))
    finally:
        context.close()


@pytest.mark.parametrize("theme", THEMES)
def test_on_a_phone_regenerate_the_switcher_and_sharing_work_and_the_shared_page_takes_the_theme(
        theme, browser, saved_chats_app, tmp_path):
    context = phone(browser, theme)
    try:
        page = context.new_page()
        page.goto(saved_chats_app.app_url)
        log_in(page, "alice", "wonderland")
        choose_theme(page, theme)
        page.locator("#chat-input").fill("Tell me about tea.")
        tap(page, page.locator("#chat-submit"))
        finished_replies(page, 1)
        regenerate_button(page).scroll_into_view_if_needed()
        assert in_view(page, regenerate_button(page))
        regenerate(page)  # a click, then 2/2 under the new reply
        tap(page, page.get_by_role("button", name="◀", exact=True))
        page.get_by_role("button", name="1/2", exact=True).wait_for(timeout=30_000)
        fits(page, theme)
        page.screenshot(path=screenshot_path(f"phone-{theme}.png", tmp_path))

        shared = command(page, "/share", "/unshare")
        link = LINK.search(shared.inner_text()).group(0)
        qr = shared.locator('img[alt="qr.png"]')
        qr.wait_for(timeout=30_000)
        qr.scroll_into_view_if_needed()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=qr.element_handle(),
                               timeout=30_000)
        assert in_view(page, qr)
        qr.screenshot(path=tmp_path / "qr.png")
        assert decoded(tmp_path / "qr.png") == link

        reader = context.new_page()  # the owner's browser: the theme chosen in the chat is there
        reader.goto(link)
        assert reader.locator("html").get_attribute("data-theme") == theme
        fits(reader, theme)
        assert in_view(reader, reader.locator("header img"))
    finally:
        context.close()


# --- by keyboard alone ----------------------------------------------------------------------

def tab_to(page, test: str, back: bool = False, presses: int = 60) -> None:
    """Press Tab (Shift+Tab with ``back``) until the focused element passes ``test``, a JavaScript
    expression of ``e``; as a person moves through a page without a mouse."""
    for _ in range(presses):
        page.keyboard.press("Shift+Tab" if back else "Tab")
        if page.evaluate(f"(e => Boolean(e && ({test})))(document.activeElement)"):
            return
    raise AssertionError(f"{presses} presses of Tab never reached {test}")


def test_by_keyboard_alone_a_reply_is_sent_stopped_regenerated_and_switched(page_factory, chat_app, short_app):
    """Only ``page.keyboard`` acts: typing, Enter, Tab to a button, Enter on it."""
    page = page_factory(chat_app.app_url)
    page.locator(ASSISTANT).first.wait_for(timeout=30_000)
    tab_to(page, "e.id === 'chat-input'")
    page.keyboard.type("Tell me a long story.")
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelectorAll('{ASSISTANT}')[1]?.innerText.length > 20",
                           timeout=60_000)
    tab_to(page, "e.id === 'stop-button'")
    page.keyboard.press("Enter")
    page.get_by_text(STOPPED).wait_for(timeout=60_000)
    assert "tok/s" not in page.locator(ASSISTANT).nth(1).inner_text(), "Stop did not stop the reply"

    page = page_factory(short_app.app_url)  # short replies: each version finishes in a moment
    page.locator(ASSISTANT).first.wait_for(timeout=30_000)
    tab_to(page, "e.id === 'chat-input'")
    page.keyboard.type("Tell me about tea.")
    page.keyboard.press("Enter")
    finished_replies(page, 1)
    tab_to(page, "e.tagName === 'BUTTON' && e.innerText.trim() === 'Regenerate'", back=True)
    page.keyboard.press("Enter")
    page.get_by_role("button", name="2/2", exact=True).wait_for(timeout=120_000)
    page.locator("#stop-button").wait_for(state="detached", timeout=120_000)
    tab_to(page, "e.tagName === 'BUTTON' && e.innerText.trim() === '◀'", back=True)
    page.keyboard.press("Enter")
    page.get_by_role("button", name="1/2", exact=True).wait_for(timeout=30_000)
    tab_to(page, "e.tagName === 'BUTTON' && e.innerText.trim() === '▶'")
    page.keyboard.press("Enter")
    page.get_by_role("button", name="2/2", exact=True).wait_for(timeout=30_000)
