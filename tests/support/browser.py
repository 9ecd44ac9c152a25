"""Driving the chat in Chromium: the page's parts, and what a person does there."""

from __future__ import annotations

import re
import sqlite3
import time

import httpx

from tests.support.metrics import metric

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"]
ASSISTANT = '.step[data-step-type="assistant_message"]'
USER = '.step[data-step-type="user_message"]'


def open_chat(page_factory, settings, locale="en-US"):
    page = page_factory(settings.app_url, locale)
    page.locator("#chat-input").wait_for(timeout=30_000)
    page.locator(ASSISTANT).first.wait_for(timeout=30_000)  # the welcome message
    return page


def log_in(page, user, password):
    """Log in on the page's login form, then wait for the welcome."""
    page.locator("#email").fill(user)
    page.locator("#password").fill(password)
    page.keyboard.press("Enter")
    page.locator(ASSISTANT).first.wait_for(timeout=30_000)


def send(page, text, tries: int = 3):
    """Type ``text``, press Enter and wait until the chat shows it as sent.

    The chat shows a sent message at once (before the server has it). With saved chats,
    Chainlit moves the page to /thread/<id> after a chat's first message, once it has
    fetched the chat list, and the input mounted again drops what was typed meanwhile
    (docs/notes.md); on a loaded machine that can come after a quick first answer. A
    message the chat does not show within seconds is typed again.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    before = page.locator(USER).count()
    for attempt in range(tries):
        page.locator("#chat-input").fill(text)
        page.keyboard.press("Enter")
        try:
            page.wait_for_function(f"n => document.querySelectorAll('{USER}').length > n",
                                   arg=before, timeout=5_000)
            return
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise


def ask(page, text, timeout_s=120):
    """Send ``text`` and return the reply's text once it is finished.

    A reply is finished when the Stop button is gone (docs/notes.md); a short reply can come
    and go before the button is seen, so first wait for the new message itself.
    """
    before = page.locator(ASSISTANT).count()
    send(page, text)
    page.locator(ASSISTANT).nth(before).wait_for(timeout=timeout_s * 1000)
    page.locator("#stop-button").wait_for(state="detached", timeout=timeout_s * 1000)
    return page.locator(ASSISTANT).last.inner_text()


def saved_rows(chat_db, query: str, params=(), ready=bool, timeout_s: float = 30) -> list:
    """The rows ``query`` finds in the app's SQLite file once ``ready(rows)``, or at the end
    of ``timeout_s``: Chainlit writes a step after the page shows it, in a task of its own."""
    deadline = time.monotonic() + timeout_s
    while True:
        with sqlite3.connect(chat_db) as db:
            rows = db.execute(query, params).fetchall()
        if ready(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def wait_until_vllm_is_idle(settings, within_s: float = 2) -> None:
    deadline = time.monotonic() + within_s
    while metric(settings.engine_base_url, "vllm:num_requests_running") != 0:
        assert time.monotonic() < deadline, f"vLLM still generating {within_s} s after Stop"
        time.sleep(0.05)


def a_stopped_long_reply(page_factory, chat_app):
    """A new chat whose first reply was stopped after some text: what to regenerate or edit."""
    page = open_chat(page_factory, chat_app)
    send(page, "Tell me a long story.")
    page.wait_for_function(f"document.querySelectorAll('{ASSISTANT}')[1]?.innerText.length > 20",
                           timeout=60_000)
    page.locator("#stop-button").evaluate("button => button.click()")
    page.get_by_text("Stopped. The text above is kept.").wait_for(timeout=60_000)
    return page


def new_chat(page) -> None:
    """Click New chat (and confirm it when the chat asks)."""
    page.locator("#new-chat-button").click()
    confirm = page.locator("#confirm")
    if confirm.count():
        confirm.click()


def reopen(page, title: str) -> None:
    """Start a new chat, then open the saved one called ``title`` from the history."""
    new_chat(page)
    page.locator("#thread-history").get_by_text(title).first.click()
    page.locator(USER).first.wait_for(timeout=30_000)


FIGURES = re.compile(r"(\d+) prompt \+ (\d+) reply tokens")


def replies(page) -> list[str]:
    """The texts of the replies that carry their figures line, in order."""
    return [t for t in page.locator(ASSISTANT).all_inner_texts() if "reply tokens" in t]


def finished_replies(page, n: int, timeout_s: float = 120) -> list[str]:
    """Wait until ``n`` replies carry their figures line and the chat's task has ended (the
    Stop button gone: until then the input ignores Enter, and a message sent at once is
    lost, as a rehearsal on a loaded machine found); return the texts of all of them."""
    page.wait_for_function(
        f"n => [...document.querySelectorAll('{ASSISTANT}')]"
        ".filter(e => /reply tokens/.test(e.innerText)).length >= n", arg=n, timeout=timeout_s * 1000)
    page.locator("#stop-button").wait_for(state="detached", timeout=timeout_s * 1000)
    return replies(page)


def figures(reply: str) -> tuple[int, int]:
    prompt, completion = FIGURES.search(reply).groups()
    return int(prompt), int(completion)


def body(reply: str) -> str:
    """A reply's words, without its figures line or buttons, for comparing texts."""
    return re.sub(r"\W+", "", reply.split("⏱")[0])


def tokens(settings, messages: list[dict]) -> int:
    """What the engine's /tokenize counts for these messages (the app's own way to count)."""
    response = httpx.post(f"{settings.engine_base_url}/tokenize", timeout=30, json={
        "model": settings.served_model_name, "messages": messages, "add_generation_prompt": True})
    return response.json()["count"]


def user_prompt(settings, content: str) -> int:
    return tokens(settings, [{"role": "system", "content": settings.system_prompt},
                             {"role": "user", "content": content}])


def regenerate_button(page):
    return page.get_by_role("button", name="Regenerate")


def regenerate(page, versions: int = 2) -> str:
    """Click Regenerate; the new reply, once it shows in the old one's place with its
    switcher at "versions/versions" (app/conversation/switcher.py)."""
    regenerate_button(page).click()
    page.get_by_role("button", name=f"{versions}/{versions}", exact=True).wait_for(timeout=120_000)
    page.locator("#stop-button").wait_for(state="detached", timeout=120_000)
    return replies(page)[-1]


def regenerated(page, tries: int = 3) -> tuple[str, str]:
    """Ask, Regenerate: (first reply, second reply), the second shown with 2/2.

    The demo model at the chat's temperature 0.7 gives the same 24 tokens twice for this
    question about one time in 50 (200 asks of the engine: P(two equal) = 0.021), which tells
    two versions apart by nothing; a chat where that happened is started again in a new one.
    """
    for _ in range(tries):
        send(page, "Tell me about tea.")
        first = finished_replies(page, 1)[-1]
        second = regenerate(page)
        if body(second) != body(first):
            return first, second
        new_chat(page)
        page.wait_for_function(f"!document.querySelector('{USER}')", timeout=30_000)
    raise AssertionError(f"Regenerate gave the same text {tries} times (temperature 0.7, no seed)")


# --- editing a sent message -------------------------------------------------------------

def edit_the_first_of_two(page, edited: str) -> None:
    """Two exchanges (tea, coffee), then the first message edited to ``edited``."""
    send(page, "Tell me about tea.")
    finished_replies(page, 1)
    send(page, "And coffee?")
    finished_replies(page, 2)
    page.locator(USER).first.hover()
    page.locator(USER).first.locator(".edit-message").click()
    page.locator("#edit-chat-input").fill(edited)
    page.locator(".confirm-edit").click()


# --- attached files ---------------------------------------------------------------------

def send_with_files(page, typed: str, attached: list[tuple[str, str, bytes]]) -> None:
    page.locator("#upload-button-input").set_input_files(
        [{"name": name, "mimeType": mime, "buffer": data} for name, mime, data in attached])
    composer = page.locator("#message-composer")
    for name, _, _ in attached:  # each file is taken: a chip (a picture for an image)
        composer.get_by_text(name, exact=True).or_(composer.get_by_alt_text(name)).wait_for(timeout=30_000)
    page.locator("#chat-input").fill(typed)
    # The submit button waits for every upload to finish.
    page.locator("#chat-submit:not([disabled])").wait_for(timeout=30_000)
    page.keyboard.press("Enter")


COLUMN, NAME, BODY, NOTE, FIGURES_LINE = (".compare-column", ".compare-model", ".compare-text",
                                          ".compare-note", ".compare-figures")


def pick(page, name: str, tries: int = 3) -> None:
    """Choose ``name`` in Chainlit's chat profile selector; wait for the new chat's welcome.

    A menu opened while the page mounts its header again (a saved chat's move to
    /thread/<id>, docs/notes.md) closes before its option is clicked; it is opened again.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    had_messages = page.locator(USER).count() > 0
    option = page.get_by_role("option", name=name, exact=True)
    for attempt in range(tries):
        if not page.locator('#chat-profiles[data-state="open"]').count():
            page.locator("#chat-profiles").click()
        try:
            option.click(timeout=10_000)
            break
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise
    if had_messages:  # Chainlit asks before it leaves a chat for a new one
        page.locator("#confirm").click()
    page.locator(ASSISTANT).filter(has_text=f"I am {name}").first.wait_for(timeout=60_000)


LINK = re.compile(r"https?://[^\s)]+/shared/[A-Za-z0-9_-]{43}")


def command(page, line: str, answer: str):
    """Send a chat command and wait for its answer and for the chat to take input again.

    A saved chat's first message moves the page to /thread/<id>, which shows what the database
    holds (docs/notes.md): an answer that came while that page loaded is saved but not shown
    until the page loads again, so it is looked for once more after a reload, as a user would.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    send(page, line)
    message = page.locator(ASSISTANT).filter(has_text=answer).last
    try:
        message.wait_for(timeout=30_000)
    except PlaywrightTimeout:
        if "/thread/" not in page.url:
            raise
        page.reload()
        message.wait_for(timeout=30_000)
    page.locator("#stop-button").wait_for(state="detached", timeout=30_000)
    return message
