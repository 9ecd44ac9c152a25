"""The chat in a real Chromium (Debian's), driven by Playwright, against the real engine."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.engine, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"]
ASSISTANT = '.step[data-step-type="assistant_message"]'
# Set ERNIE_UPDATE_SCREENSHOT=1 to refresh the README's picture from this test.
SCREENSHOT = ROOT / "docs" / "chat.png"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_chat(browser, settings, locale="en-US"):
    page = browser.new_page(locale=locale, viewport={"width": 1100, "height": 800})
    page.goto(settings.app_url)
    page.locator("#chat-input").wait_for(timeout=30_000)
    page.locator(ASSISTANT).first.wait_for(timeout=30_000)  # the welcome message
    return page


def send(page, text):
    page.locator("#chat-input").fill(text)
    page.keyboard.press("Enter")


def test_message_gets_a_streamed_reply_with_figures(browser, chat_app, tmp_path):
    page = open_chat(browser, chat_app)
    assert "demo model" in page.locator(ASSISTANT).first.inner_text()
    before = page.locator(ASSISTANT).count()
    send(page, "今天天气怎么样？")

    # Sample the reply while it streams: it must be seen growing, not appear at once.
    reply = page.locator(ASSISTANT).nth(before)
    reply.wait_for(timeout=60_000)
    lengths = []
    deadline = time.monotonic() + 120
    while page.locator("#stop-button").count() and time.monotonic() < deadline:
        lengths.append(len(reply.inner_text()))
        time.sleep(0.05)
    assert len({n for n in lengths if n > 0}) >= 2, f"reply did not stream: {lengths}"
    final = reply.inner_text()
    assert "tok/s" in final and "prompt" in final, final
    page.screenshot(path=str(SCREENSHOT if os.environ.get("ERNIE_UPDATE_SCREENSHOT")
                             else tmp_path / "chat.png"))
