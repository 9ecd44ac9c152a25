"""In a real Chromium: KaTeX for the model's math, dollars and code as written; a reopened saved
chat shown at its end and with its settings."""

from __future__ import annotations

import re
import sqlite3


from app.conversation.math_text import display_text
from tests.support.screenshots import screenshot_path
from tests.support.browser import ASSISTANT, USER, ask, log_in, open_chat, saved_rows, send

# What a model writes: display and inline math in both notations, amounts, code.
RAW_REPLY = ("The area is \\(\\pi r^2\\) and\n\n\\[\\int_0^1 x^2\\,dx = \\frac{1}{3}\\]\n\n"
             "Tickets cost $5 and $10, or $3.50 each; so $x^2$ grows.\n\n"
             "```python\nprice = '$5'  # $x$ stays\n```\n\nInline `$y$` too.")


def test_a_typed_message_shows_its_dollars_and_no_formula(page_factory, app_without_engine):
    page = open_chat(page_factory, app_without_engine)
    send(page, "It costs $5 and $10, not $x$.")
    user = page.locator(USER).first
    user.wait_for(timeout=30_000)
    assert "It costs $5 and $10, not $x$." in user.inner_text()
    assert user.locator(".katex").count() == 0


def test_a_reply_renders_its_formulas_and_keeps_amounts_and_code(page_factory, saved_chats_app, tmp_path):
    """The demo model cannot be made to write math, so the saved reply is given the text the
    app saves for a model that wrote RAW_REPLY (display_text), and the chat is reopened: the
    real frontend renders what the app sends."""
    page = page_factory(saved_chats_app.app_url)
    log_in(page, "alice", "wonderland")
    ask(page, "Show me some math.")
    saved = saved_rows(saved_chats_app.chat_db, (  # this chat's finished reply
        "SELECT id FROM steps WHERE type = 'assistant_message' AND output LIKE '%reply tokens%'"
        " AND \"threadId\" = (SELECT \"threadId\" FROM steps WHERE type = 'user_message' AND"
        " output = 'Show me some math.' ORDER BY \"createdAt\" DESC LIMIT 1)"))
    assert len(saved) == 1, saved
    with sqlite3.connect(saved_chats_app.chat_db) as db:
        db.execute("UPDATE steps SET output = ? WHERE id = ?", (display_text(RAW_REPLY), saved[0][0]))
    page.reload()
    page.locator("#thread-history").get_by_text("Show me some math.").first.click()
    reply = page.locator(ASSISTANT).filter(has_text="Tickets cost")
    reply.wait_for(timeout=30_000)
    page.screenshot(path=screenshot_path("formulas.png", tmp_path), full_page=True)
    assert reply.locator(".katex-display").count() == 1
    assert reply.locator(".katex").count() == 3  # pi r^2, the integral, x^2
    shown = reply.inner_text()
    assert "Tickets cost $5 and $10, or $3.50 each" in shown
    assert reply.locator("pre code").inner_text().strip() == "price = '$5'  # $x$ stays"
    assert reply.get_by_text("$y$", exact=True).evaluate("e => e.tagName") == "CODE"
    # KaTeX's styles come from the chat (public/katex): its MathML copy is hidden.
    assert reply.locator(".katex-mathml").first.evaluate("e => getComputedStyle(e).position") == "absolute"


def test_a_reopened_chat_comes_back_with_its_settings(page_factory, saved_chats_app):
    """Max reply tokens and temperature changed in the panel come back with the chat: the
    panel shows them and the next reply is made with them (ignore_eos: exactly 16 tokens
    where the app's default is 24)."""
    page = page_factory(saved_chats_app.app_url)
    log_in(page, "alice", "wonderland")
    page.locator("#chat-settings-open-modal").click()
    sliders = page.get_by_role("slider")
    sliders.first.focus()  # temperature
    page.keyboard.press("End")  # 2.0
    sliders.last.focus()  # max reply tokens
    page.keyboard.press("Home")  # the minimum: 16
    page.get_by_role("button", name=re.compile("Confirm|确认")).click()
    assert re.search(r"\+ 16 reply tokens", ask(page, "Settings to keep."))

    page.reload()
    page.locator("#thread-history").get_by_text("Settings to keep.").first.click()
    page.locator(USER).first.wait_for(timeout=30_000)
    page.get_by_text(re.compile(r"\+ 16 reply tokens")).first.wait_for(timeout=30_000)
    page.locator("#chat-settings-open-modal").click()
    sliders = page.get_by_role("slider")
    assert sliders.first.get_attribute("aria-valuenow") == "2"
    assert sliders.last.get_attribute("aria-valuenow") == "16"
    page.get_by_role("button", name=re.compile("Confirm|确认")).click()
    assert re.search(r"\+ 16 reply tokens", ask(page, "And now?"))


# The chat's scrolling element: the nearest ancestor of the last message that scrolls.
SCROLLER = """() => { let e = [...document.querySelectorAll('.step')].pop();
  while (e && !(e.scrollHeight > e.clientHeight + 5 && /(auto|scroll)/.test(getComputedStyle(e).overflowY)))
    e = e.parentElement;
  return e ? [e.scrollTop, e.scrollHeight, e.clientHeight] : null; }"""


def test_a_reopened_long_chat_is_shown_at_its_end(page_factory, saved_chats_app):
    """Chainlit 2.12 scrolls a resumed thread to its end by itself: kept so by this test."""
    page = page_factory(saved_chats_app.app_url)
    log_in(page, "alice", "wonderland")
    for i in range(7):
        ask(page, f"Long chat {i}\n\nline\n\nline\n\nline")
    page.reload()
    page.locator("#thread-history").get_by_text("Long chat 0").first.click()
    page.get_by_text("Long chat 6").first.wait_for(timeout=30_000)
    page.wait_for_function(f"() => {{ const s = ({SCROLLER})(); return s && s[0] + s[2] >= s[1] - 2; }}",
                           timeout=10_000)
