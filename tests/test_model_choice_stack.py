"""Choosing the model in the chat (app/engine/model_choice.py), against two real vLLMs and a real Chromium.

Two vLLM processes serve the demo model, the second from a copy of its folder (so it is served
under another name) with a smaller window; the app runs with ERNIE_MODELS naming both, saved
chats and login.  Which engine answered is read from the engines' own /metrics, never from the
app's texts.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import socketio

from server.loadtest.lib.chat_socket import SOCKET_PATH, user_step
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from server.paths import ROOT
from tests.conftest import TEST_MAX_MODEL_LEN, engine_settings, metric, start_app
from tests.screenshots import screenshot_path
from tests.test_browser import (  # noqa: F401 (browser and page_factory are fixtures)
    ASSISTANT, USER, browser, log_in, page_factory, reopen, send)
from tests.test_chat_features import finished_replies

pytestmark = [pytest.mark.engine, pytest.mark.browser]

SMALL_WINDOW = 1024
REPLY_TOKENS = 16
REQUESTS = "vllm:request_success_total"


def free_port_pair() -> int:
    """A port P with P + 1 free too: ERNIE_MODELS' second engine listens on the next port."""
    while True:
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


@pytest.fixture(scope="module")
def two_models(demo_model, tmp_path_factory):
    """A: the demo model; B: a copy of its folder, so served under another name."""
    tmp = tmp_path_factory.mktemp("two-models")
    yield from serve_two_models(demo_model, shutil.copytree(demo_model, tmp / "demo-copy"), tmp,
                                max_tokens=REPLY_TOKENS)


def serve_two_models(demo_model, second, tmp, **app_settings):
    """Engines A (``demo_model``, 4096 tokens) on P and B (``second``, 1024 tokens) on P + 1, and
    the app with ERNIE_MODELS on both, saved chats, login and ``app_settings``; yields (app
    settings, [A's URL, B's URL], (A's name, B's name))."""
    port = free_port_pair()
    stacks = []
    try:
        for folder, window, at in ((demo_model, TEST_MAX_MODEL_LEN, port), (second, SMALL_WINDOW, port + 1)):
            settings = engine_settings(tmp / f"engine-{folder.name}", model=str(folder), served_model_name=folder.name,
                                       engine_port=at, max_model_len=window)
            stacks.append(Stack(settings, root=ROOT))
            stacks[-1].start_engine()
        models = f"{demo_model}:{TEST_MAX_MODEL_LEN},{second}:{SMALL_WINDOW}"
        urls = [stack.settings.engine_base_url for stack in stacks]
        for app in start_app(tmp / "app", models=models, engine_port=port, kv_cache_gib=None,
                             ignore_eos=True, chat_db=tmp / "chats.db", users="alice:wonderland",
                             **app_settings):
            yield app, urls, (demo_model.name, second.name)
    finally:
        for stack in stacks:
            stack.stop()


def requests_of(urls: list[str]) -> list[float]:
    return [metric(url, REQUESTS) for url in urls]


def requests_when(urls: list[str], expected: list[float]) -> list[float]:
    """The engines' finished requests once they are ``expected`` or 10 s passed: vLLM counts a
    request a moment after its last token has gone out."""
    deadline = time.monotonic() + 10
    while (now := requests_of(urls)) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


def pick(page, name: str) -> None:
    """Choose ``name`` in Chainlit's chat profile selector; wait for the new chat's welcome."""
    had_messages = page.locator(USER).count() > 0
    if not page.locator('#chat-profiles[data-state="open"]').count():
        page.locator("#chat-profiles").click()
    page.get_by_role("option", name=name).click()
    if had_messages:  # Chainlit asks before it leaves a chat for a new one
        page.locator("#confirm").click()
    page.locator(ASSISTANT).filter(has_text=f"I am {name}").first.wait_for(timeout=60_000)


def first_reply_on(page_factory, app, name: str, message: str):
    """Alice's page with a new chat on model ``name`` that sent ``message``; and its reply."""
    page = page_factory(app.app_url)
    log_in(page, "alice", "wonderland")
    pick(page, name)
    send(page, message)
    [reply] = finished_replies(page, 1)
    return page, reply


def long_text(url: str, model: str, tokens: int) -> str:
    """A message of about ``tokens`` tokens for the model, as its engine counts them."""
    words = "weather " * tokens
    while True:
        answer = httpx.post(f"{url}/tokenize", json={"model": model, "prompt": words}, timeout=30)
        counted = answer.json()["count"]
        if counted <= tokens:
            return words
        words = words[: len(words) * tokens // counted]


def test_the_picker_shows_each_models_window_and_a_chat_on_b_is_answered_by_b_within_its_window(
        page_factory, two_models, tmp_path):
    app, urls, (name_a, name_b) = two_models
    page = page_factory(app.app_url)
    log_in(page, "alice", "wonderland")
    page.locator("#chat-profiles").click()
    options = page.get_by_role("option")
    options.first.wait_for(timeout=30_000)
    assert options.all_inner_texts() == [name_a, name_b]
    page.get_by_role("option", name=name_b).hover()
    description = page.locator('#chat-profile-description[data-state="open"]')  # the closing one lingers
    description.filter(has_text=f"{SMALL_WINDOW:,} tokens").wait_for(timeout=30_000)
    assert "no replies yet" in description.inner_text()
    page.get_by_role("option", name=name_a).hover()
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
    page.get_by_role("option", name=name_b).hover()
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
    before = requests_of(urls)
    send(page, "Which word?")
    replies = finished_replies(page, 2)
    assert requests_when(urls, [before[0], before[1] + 1]) == [before[0], before[1] + 1]
    assert replies[-1].split("⏱")[-1].strip().startswith(f"{name_b} ·"), replies[-1]


async def forged_chat(url: str, cookie: str, profile: str) -> list[dict]:
    """A chat over the raw socket whose chatProfile is ``profile``, one message in it; the
    messages the app sent, once the reply came with its figures."""
    shown: list[dict] = []
    welcomed, replied = asyncio.Event(), asyncio.Event()
    client = socketio.AsyncClient(reconnection=False)

    async def on_message(data):
        metadata = data.get("metadata")
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata or {}
        kind, output = metadata.get("kind"), data.get("output") or ""
        shown.append({"kind": kind, "output": output})
        if kind in ("welcome", "error"):
            welcomed.set()
        if kind == "error" or kind == "reply" and "⏱" in output:
            replied.set()
    client.on("new_message", on_message)
    client.on("update_message", on_message)

    await client.connect(url, socketio_path=SOCKET_PATH, transports=["websocket"], headers={"Cookie": cookie},
                         auth={"sessionId": str(uuid.uuid4()), "clientType": "webapp", "threadId": "",
                               "userEnv": "{}", "chatProfile": profile}, wait_timeout=30)
    try:
        await client.emit("connection_successful")
        await asyncio.wait_for(welcomed.wait(), 60)
        await client.emit("client_message", {"message": user_step("Who answers?"), "fileReferences": []})
        await asyncio.wait_for(replied.wait(), 180)
    finally:
        await client.disconnect()
    return shown


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
