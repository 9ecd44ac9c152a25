"""The live view with two real vLLMs (tests/models/conftest.py's two_models): figures per
model, and the page in a real Chromium."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from app.engine.recent_replies import MIN_RATE_INTERVAL_S
from app.pages.live_page import DATA, PAGE
from tests.support.screenshots import screenshot_path
from tests.support.browser import log_in, send
from tests.support.browser import finished_replies
from tests.support.chat import forged_chat
from tests.support.browser import pick
from tests.support.browser import LINK, command


# --- several models: two real vLLMs (two_models, tests/models/conftest.py) ----------------------

def logged_in(http: httpx.Client) -> str:
    """Log ``http`` in as alice (two_models' user); its cookie header, for a raw chat socket."""
    assert http.post("/login", data={"username": "alice", "password": "wonderland"}).status_code == 200
    return "; ".join(f"{k}={v}" for k, v in http.cookies.items())


def test_with_two_models_each_has_its_own_figures_and_a_served_name_shows_one(two_models):
    app, urls, (name_a, name_b) = two_models
    with httpx.Client(base_url=app.app_url, timeout=30) as http:
        cookie = logged_in(http)
        assert [m["name"] for m in http.get(DATA).json()["models"]] == [name_a, name_b]  # the rates' start
        # A thread of its own: the browser tests' Playwright keeps an event loop in this one.
        with ThreadPoolExecutor(1) as thread:
            thread.submit(asyncio.run, forged_chat(app.app_url, cookie, name_b)).result()
        time.sleep(MIN_RATE_INTERVAL_S)
        every = http.get(DATA).json()
        only_b = http.get(DATA, params={"model": name_b}).json()
        forged = [http.get(DATA, params={"model": asked}) for asked in ("../../etc", "<script>")]

    a, b = every["models"]
    assert (a["name"], b["name"]) == (name_a, name_b) and a["engine_up"] and b["engine_up"]
    assert a["metrics"] and b["metrics"] and every["engine_up"] and not every["unknown_model"]
    assert 0 <= a["kv_cache_pct"] <= 100 and 0 <= b["kv_cache_pct"] <= 100
    assert b["tokens_per_s"] > 0 and a["tokens_per_s"] == 0, every["models"]  # B generated, A did not
    assert every["tokens_per_s"] == a["tokens_per_s"] + b["tokens_per_s"]
    assert every["kv_cache_pct"] == max(a["kv_cache_pct"], b["kv_cache_pct"])
    assert every["replies"][-1]["model"] == name_b and every["server"] == f"{name_a} ({urls[0]}), {name_b} ({urls[1]})"

    assert [m["name"] for m in only_b["models"]] == [name_b] and not only_b["unknown_model"]
    assert only_b["replies"] and {r["model"] for r in only_b["replies"]} == {name_b}
    assert only_b["server"] == f"{name_b} ({urls[1]})"
    for answer in forged:
        assert [m["name"] for m in answer.json()["models"]] == [name_a, name_b] and answer.json()["unknown_model"]
        assert "../../etc" not in answer.text and "<script>" not in answer.text


def test_the_page_draws_a_line_per_model_and_a_shared_chat_with_one_model(page_factory, two_models, tmp_path):
    app, _, (name_a, name_b) = two_models
    chat = page_factory(app.app_url)
    log_in(chat, "alice", "wonderland")
    live = chat.context.new_page()
    live.set_viewport_size({"width": 1280, "height": 720})
    live.goto(f"{app.app_url}{PAGE}")
    live.locator("#legend li").nth(1).wait_for(timeout=20_000)
    assert live.locator("#legend li").all_inner_texts() == [name_a, name_b]
    for name in (name_b, name_a):  # a reply from each in turn, while the page plots them
        pick(chat, name)
        send(chat, f"Hello, {name}.")
        finished_replies(chat, 1)
    for name in (name_a, name_b):
        live.locator("#ttft-list li").filter(has_text=f"{name} · ").first.wait_for(timeout=20_000)
    assert live.locator("#notice").is_hidden()
    live.screenshot(path=screenshot_path("live-models.png", tmp_path))

    # One model, with the QR code of the chat just shared from it.
    link = LINK.search(command(chat, "/share", "/unshare").inner_text()).group(0)
    live.goto(f"{app.app_url}{PAGE}?shared={link.rsplit('/', 1)[1]}&model={name_a}")
    live.locator("#shared img").wait_for(timeout=30_000)
    live.locator("#server").filter(has_text=name_a).wait_for(timeout=20_000)
    assert name_b not in live.locator("#server").inner_text() and live.locator("#legend").is_hidden()
    live.locator("#ttft-list li").first.wait_for(timeout=20_000)
    assert not live.locator("#ttft-list li").first.inner_text().startswith(name_a)  # no name: one model

    # A forged name: never run, never shown; every model, and the notice.
    live.goto(f"{app.app_url}{PAGE}?model=<img src=x onerror=window.pwned=1>")
    live.get_by_text("No model of that name is served here").wait_for(timeout=20_000)
    live.locator("#legend li").nth(1).wait_for(timeout=20_000)
    assert live.evaluate("window.pwned") is None and "onerror" not in live.content()
