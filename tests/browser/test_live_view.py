"""The live view's page in a real Chromium, with and without vLLM's /metrics."""

from __future__ import annotations

import re


from app.pages.live_page import PAGE
from tests.support.screenshots import screenshot_path
from tests.support.browser import ASSISTANT


# --- in the browser -----------------------------------------------------------------------

def tile(page, name) -> float:
    value = page.locator(f"#{name}").get_attribute("data-value")
    return float(value) if value else -1.0


def test_without_metrics_the_page_says_so_and_still_counts_replies(app_on_plain_server, new_page):
    live = new_page(locale="en-US")
    live.goto(f"{app_on_plain_server.app_url}{PAGE}")
    live.get_by_text("This server has no vLLM /metrics").wait_for(timeout=10_000)
    chat = new_page(locale="en-US")
    chat.goto(app_on_plain_server.app_url)
    chat.locator(ASSISTANT).first.wait_for(timeout=60_000)
    chat.locator("#chat-input").fill("hello")
    chat.keyboard.press("Enter")
    live.wait_for_function("document.querySelector('#ttft').dataset.value >= 1", timeout=30_000)
    assert re.search(r"\d+ ms · [\d.]+ tok/s", live.locator("#ttft-list").inner_text())
    assert live.locator("#kv .value").inner_text() == "–"


def test_the_figures_move_while_a_chat_replies(chat_app, tmp_path, new_page):
    chat = new_page(locale="en-US", viewport={"width": 1100, "height": 800})
    chat.goto(chat_app.app_url)
    welcome = chat.locator(ASSISTANT).first
    welcome.wait_for(timeout=60_000)
    assert "served by vLLM at http" in welcome.inner_text()
    assert "counted exactly by vLLM" in welcome.inner_text()
    link = welcome.get_by_role("link", name="Live view")
    assert link.get_attribute("href") == PAGE

    live = new_page(locale="en-US", viewport={"width": 1280, "height": 720})
    live.goto(f"{chat_app.app_url}{PAGE}")
    live.wait_for_function("document.querySelector('#chats').dataset.value >= 1", timeout=20_000)
    assert live.locator("#notice").is_hidden(), "vLLM has /metrics: no notice"
    replies_before = tile(live, "ttft")

    before = chat.locator(ASSISTANT).count()
    chat.locator("#chat-input").fill("Tell me a long story.")
    chat.keyboard.press("Enter")
    # While the reply streams (3,000 tokens), the page shows vLLM generating.
    live.wait_for_function("document.querySelector('#tokens').dataset.value > 0", timeout=60_000)
    live.wait_for_function("document.querySelector('#requests').dataset.value >= 1", timeout=30_000)
    assert 0 <= tile(live, "kv") <= 100
    # Some way into the reply (a few seconds of plot), Stop: a busy machine must not
    # have to decode all 3,000 tokens. The stopped reply joins the list.
    chat.wait_for_function(
        f"document.querySelectorAll('{ASSISTANT}')[{before}]?.innerText.length > 2000",
        timeout=120_000)
    chat.locator("#stop-button").evaluate("button => button.click()")
    live.wait_for_function(f"document.querySelector('#ttft').dataset.value > {replies_before}",
                           timeout=60_000)
    first = live.locator("#ttft-list li").first.inner_text()
    assert re.fullmatch(r"[\d,]+ ms · – tok/s", first), first  # no decode speed when cut
    live.wait_for_function("document.querySelector('#requests').dataset.value == 0", timeout=30_000)
    live.screenshot(path=screenshot_path("live.png", tmp_path))

    chinese = new_page(locale="zh-CN")
    chinese.goto(f"{chat_app.app_url}{PAGE}")
    assert chinese.title() == "ernie-chat 实时面板"
    assert chinese.locator("#tokens h2").inner_text() == "每秒 token 数"
