"""Choosing the model in the chat (app/engine/model_choice.py), against two real vLLMs and a real Chromium.

Two vLLM processes, the models tier's pair (tests/models/conftest.py): the demo model, and
demo-small with a smaller window; the app runs with ERNIE_MODELS naming both, saved chats and
login.  Which engine answered is read from the engines' own /metrics, never from the
app's texts.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.settings import TEST_MAX_MODEL_LEN
from tests.support.screenshots import screenshot_path
from tests.support.browser import ASSISTANT, USER, log_in, reopen, send, pick
from tests.support.browser import finished_replies
from tests.support.models import SMALL_WINDOW, long_text, requests_of, requests_when, REPLY_TOKENS
from tests.support.chat import forged_chat


def first_reply_on(page_factory, app, name: str, message: str):
    """Alice's page with a new chat on model ``name`` that sent ``message``; and its reply."""
    page = page_factory(app.app_url)
    log_in(page, "alice", "wonderland")
    pick(page, name)
    send(page, message)
    [reply] = finished_replies(page, 1)
    # A saved chat's first message moves the page to /thread/<id> (docs/notes.md), which can
    # come after the reply on a loaded machine and close a menu opened before it.
    page.wait_for_url(re.compile(r"/thread/"), timeout=30_000)
    return page, reply


def test_the_picker_shows_each_models_window_and_a_chat_on_b_is_answered_by_b_within_its_window(
        page_factory, two_models, tmp_path):
    app, urls, (name_a, name_b) = two_models
    page = page_factory(app.app_url)
    log_in(page, "alice", "wonderland")
    page.locator("#chat-profiles").click()
    options = page.get_by_role("option")
    options.first.wait_for(timeout=30_000)
    assert options.all_inner_texts() == [name_a, name_b]
    page.get_by_role("option", name=name_b, exact=True).hover()
    description = page.locator('#chat-profile-description[data-state="open"]')  # the closing one lingers
    description.filter(has_text=f"{SMALL_WINDOW:,} tokens").wait_for(timeout=30_000)
    assert "no replies yet" in description.inner_text()
    page.get_by_role("option", name=name_a, exact=True).hover()
    description.filter(has_text=f"{TEST_MAX_MODEL_LEN:,} tokens").wait_for(timeout=30_000)

    pick(page, name_b)
    before = requests_of(urls)
    send(page, "Hello, model B.")
    [reply] = finished_replies(page, 1)
    assert requests_when(urls, [before[0], before[1] + 1]) == [before[0], before[1] + 1]
    assert reply.split("⏱")[-1].strip().startswith(f"{name_b} ·"), reply

    # Two messages that do not fit B's window together (they would fit A's): the older goes.
    part = long_text(urls[1], name_b, SMALL_WINDOW * 3 // 5)
    send(page, "First part: " + part)
    finished_replies(page, 2)
    send(page, "Second part: " + part)
    replies = finished_replies(page, 3)
    page.get_by_text(f"longer than the model's {SMALL_WINDOW}-token window").first.wait_for(timeout=30_000)
    prompt = int(re.search(r"(\d+) prompt", replies[-1]).group(1))
    assert prompt + REPLY_TOKENS <= SMALL_WINDOW, replies[-1]
    assert requests_when(urls, [before[0], before[1] + 3]) == [before[0], before[1] + 3]

    # The picker shows B's recent speed (the page asks for the profiles when it loads).
    page.reload()
    page.locator(USER).first.wait_for(timeout=30_000)
    page.locator("#chat-profiles").click()
    page.get_by_role("option", name=name_b, exact=True).hover()
    description.filter(has_text="tokens/s").wait_for(timeout=30_000)
    page.screenshot(path=screenshot_path("model-picker.png", tmp_path))


def test_a_saved_chat_on_b_is_reopened_on_b(page_factory, two_models):
    app, urls, (name_a, name_b) = two_models
    page, _ = first_reply_on(page_factory, app, name_b, "Remember the word quince.")
    pick(page, name_a)  # a new chat, on A
    page.locator(ASSISTANT).first.wait_for(timeout=30_000)

    reopen(page, "Remember the word quince.")
    page.locator("#chat-profiles").filter(has_text=name_b).wait_for(timeout=30_000)  # the menu follows it
    page.reload()
    page.locator(USER).first.wait_for(timeout=60_000)
    page.locator("#chat-profiles").filter(has_text=name_b).wait_for(timeout=30_000)
    # The reopened chat shown whole before the next message: a reply that came back (in 0.1 s)
    # while a loaded machine's page still drew the history once did not show (a full run).
    finished_replies(page, 1)
    before = requests_of(urls)
    send(page, "Which word?")
    replies = finished_replies(page, 2)
    after = requests_when(urls, [before[0], before[1] + 1])
    # None went to A. B counted its request (once in a full run, one more than the chat's single
    # reply, from a source not found yet: the saved chat held one question and one answer).
    assert after[0] == before[0] and after[1] >= before[1] + 1, (before, after)
    assert replies[-1].split("⏱")[-1].strip().startswith(f"{name_b} ·"), replies[-1]


@pytest.mark.parametrize("profile", ["http://evil.example:1/x", "../demo-copy", "Translator"])
def test_a_forged_chat_profile_gets_the_first_model_and_is_told_so(two_models, profile):
    app, urls, (name_a, _) = two_models
    with httpx.Client(base_url=app.app_url, timeout=30) as http:
        assert http.post("/login", data={"username": "alice", "password": "wonderland"}).status_code == 200
        cookie = "; ".join(f"{k}={v}" for k, v in http.cookies.items())
    before = requests_of(urls)
    # A thread of its own: Playwright's sync API keeps an event loop running in this one.
    with ThreadPoolExecutor(1) as thread:
        shown = thread.submit(asyncio.run, forged_chat(app.app_url, cookie, profile)).result()
    after = requests_when(urls, [before[0] + 1, before[1]])
    notices = [m["output"] for m in shown if m["kind"] == "model_unknown"]
    assert notices and f"**{name_a}**" in notices[0] and profile not in notices[0], shown
    replies = [m["output"] for m in shown if m["kind"] == "reply" and "⏱" in m["output"]]
    assert replies and replies[-1].split("⏱")[-1].strip().startswith(f"{name_a} ·"), shown
    assert after[0] == before[0] + 1 and after[1] == before[1], (before, after)


def test_with_models_the_panel_offers_the_personas_and_one_reaches_the_engine(page_factory, two_models):
    app, urls, (name_a, _) = two_models
    page, plain = first_reply_on(page_factory, app, name_a, "Hello there.")

    page.locator("#new-chat-button").click()  # the same first message in a new chat, as the Tutor
    page.locator("#confirm").click()
    page.locator(USER).first.wait_for(state="detached", timeout=30_000)
    page.locator("#chat-settings-open-modal").click()
    page.locator("#persona").click()
    page.get_by_role("option", name="Tutor").click()
    page.get_by_role("button", name=re.compile("Confirm|确认")).click()
    page.locator("#chat-settings-open-modal").click()  # the panel shows the persona's prompt
    page.locator("#system_prompt").filter(has_text="patient tutor").wait_for(timeout=30_000)
    page.keyboard.press("Escape")
    send(page, "Hello there.")
    [tutored] = finished_replies(page, 1)
    # The engine counted the Tutor's longer system prompt (vLLM's own prompt count).
    prompt = [int(re.search(r"(\d+) prompt", reply).group(1)) for reply in (plain, tutored)]
    assert prompt[1] > prompt[0] + 5, prompt
