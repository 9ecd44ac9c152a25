"""The live view for presenters: its figures, its routes, and the page in a real Chromium."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx
import pytest

from app.engine.engine_client import ReplyStats
from app.engine.recent_replies import MIN_RATE_INTERVAL_S, RecentReplies, Reading
from app.pages.live_page import DATA, PAGE, choose, page_html, read_engines
from app.texts import lang_of
from server.metrics import EngineMetrics
from server.passwords import hash_password
from server.stack.processes import free_port
from tests.screenshots import screenshot_path
from tests import openai_standin
from tests.conftest import start_app
from tests.test_browser import browser, log_in, page_factory, send  # noqa: F401 (fixtures)
from tests.test_chat_features import finished_replies
from tests.test_model_choice_stack import forged_chat, pick, two_models  # noqa: F401 (a fixture)
from tests.test_share import LINK, command



def metrics(generated: int, running=1, waiting=0, kv=0.25) -> EngineMetrics:
    return EngineMetrics(kv_cache_usage=kv, running=running, waiting=waiting, preemptions=0,
                         kv_cache_tokens=1000, prompt_tokens=10, generation_tokens=generated)


def test_rates_come_from_two_readings_and_close_readings_reuse_the_last():
    live = RecentReplies()
    assert live.rate("engine", 100, now=10.0) == 0.0           # one reading: no rate yet
    assert live.rate("engine", 300, now=12.0) == 100.0         # 200 tokens in 2 s
    assert live.rate("engine", 310, now=12.0 + MIN_RATE_INTERVAL_S / 2) == 100.0
    assert live.rate("engine", 5, now=20.0) == 0.0             # the counter went back: a restart


async def reply(stats, n):
    """A reply of ``n`` pieces whose first came 250 ms after it was asked for."""
    stats.first_token_at = stats.started + 0.25
    for i in range(n):
        yield f"w{i} "
    stats.finished_at, stats.completion_tokens = stats.first_token_at + 1.0, n


async def test_track_counts_pieces_and_records_each_reply_that_began():
    live = RecentReplies()
    stats = ReplyStats(started=100.0)
    seen = []
    async for piece in live.track(reply(stats, 11), stats):
        seen.append(piece)
        assert live.streaming == 1
    assert len(seen) == 11 and live.pieces == 11 and live.streaming == 0
    last = live.replies[-1]
    assert (last.ttft_ms, last.tokens_per_s, last.tokens) == (250.0, 10.0, 11)

    stats = ReplyStats(started=200.0)
    stopped = live.track(reply(stats, 50), stats)  # Stop after 3 pieces
    async for _ in stopped:
        if live.pieces == 14:
            break
    await stopped.aclose()
    assert live.streaming == 0 and live.recorded == 2
    assert (live.replies[-1].ttft_ms, live.replies[-1].tokens_per_s) == (250.0, None)

    failed = ReplyStats()

    async def refused(stats):  # the server refused: no first token, nothing to record
        raise RuntimeError("refused")
        yield ""
    with pytest.raises(RuntimeError):
        async for _ in live.track(refused(failed), failed):
            pass
    assert live.streaming == 0 and live.recorded == 2


def test_snapshot_uses_the_engine_where_it_has_metrics_else_the_app():
    live = RecentReplies()
    live.snapshot(10.0, [Reading("m", metrics(1000))], chats=2)
    engine = live.snapshot(11.0, [Reading("m", metrics(1400, running=3, waiting=2))], chats=2)
    assert (engine["tokens_per_s"], engine["running"], engine["waiting"]) == (400.0, 3, 2)
    assert engine["kv_cache_pct"] == 25.0 and engine["metrics"] and engine["chats"] == 2
    live.tallies["m"].pieces = 50
    live.snapshot(20.0, [Reading("m", None)], chats=1)
    live.tallies["m"].pieces = 80
    plain = live.snapshot(22.0, [Reading("m", None)], chats=1)
    assert plain["tokens_per_s"] == 15.0 and not plain["metrics"]
    assert plain["running"] is None and plain["kv_cache_pct"] is None


def test_each_model_has_its_own_rate_the_top_sums_them_and_shows_the_fullest_kv():
    live = RecentReplies()
    live.snapshot(10.0, [Reading("a", metrics(1000)), Reading("b", metrics(50))], chats=3)
    both = live.snapshot(12.0, [Reading("a", metrics(1200, running=2, waiting=1, kv=0.1)),
                                Reading("b", metrics(850, running=5, waiting=0, kv=0.6))], chats=3)
    a, b = both["models"]
    assert (a["name"], a["tokens_per_s"], a["running"], a["waiting"], a["kv_cache_pct"]) == ("a", 100.0, 2, 1, 10.0)
    assert (b["name"], b["tokens_per_s"], b["running"], b["waiting"], b["kv_cache_pct"]) == ("b", 400.0, 5, 0, 60.0)
    assert (both["tokens_per_s"], both["running"], both["waiting"], both["kv_cache_pct"]) == (500.0, 7, 1, 60.0)
    assert both["metrics"] and a["engine_up"] and b["engine_up"]
    # B's engine stops answering: A's figures stand, B has none, the top is A's.
    down = live.snapshot(14.0, [Reading("a", metrics(1400, running=1, kv=0.2)),
                                Reading("b", None, engine_up=False)], chats=3)
    a, b = down["models"]
    assert a["engine_up"] and a["tokens_per_s"] == 100.0 and a["kv_cache_pct"] == 20.0
    assert not b["engine_up"] and not b["metrics"] and b["running"] is None and b["kv_cache_pct"] is None
    assert (down["tokens_per_s"], down["running"], down["kv_cache_pct"]) == (100.0, 1, 20.0)


async def test_replies_name_their_model_and_one_models_figures_have_only_its_own():
    live = RecentReplies()
    for model in ("a", "b", "b"):
        stats = ReplyStats(started=0.0)
        async for _ in live.track(reply(stats, 3), stats, model):
            pass
    every = live.snapshot(5.0, [Reading("a", None), Reading("b", None)], chats=0)
    assert [r["model"] for r in every["replies"]] == ["a", "b", "b"] and every["replies_total"] == 3
    only_b = live.snapshot(5.0, [Reading("b", None)], chats=0, only=True)
    assert [r["model"] for r in only_b["replies"]] == ["b", "b"] and only_b["replies_total"] == 2
    assert [m["name"] for m in only_b["models"]] == ["b"] and live.pieces == 9


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("asked", ["../../etc", "<script>alert(1)</script>", "org/small", "small ",
                                   "http://127.0.0.1:9101", "SMALL"])
def test_only_a_served_name_shows_one_model_anything_else_every_model_and_a_notice(asked):
    from tests.test_model_choice import engines
    several = engines(models="/models/big:8192,org/small:2048", engine_port=9100).all
    assert choose(several, "small") == ([several[1]], False)
    assert choose(several, "") == (several, False)
    assert choose(several, asked) == (several, True)
    page = page_html("en", model="small")
    assert '"data": "/live/data?model=small"' in page and '"unknown_model": false' in page
    forged = page_html("en", unknown=True)
    assert f'"data": "{DATA}"' in forged and '"unknown_model": true' in forged
    assert "No model of that name is served here" in forged
    assert "显示全部模型" in page_html("zh", unknown=True)


async def test_every_engine_is_read_at_once_and_one_down_hides_none_of_the_others():
    hung = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]  # they never answer
    with openai_standin.running("plain", 4096) as url, contextlib.ExitStack() as sockets:
        for listener in hung:
            sockets.enter_context(listener)
        engines = [SimpleNamespace(name=f"hung{i}", url=f"http://127.0.0.1:{s.getsockname()[1]}")
                   for i, s in enumerate(hung)]
        engines += [SimpleNamespace(name="plain", url=url),
                    SimpleNamespace(name="gone", url=f"http://127.0.0.1:{free_port()}")]
        async with httpx.AsyncClient(timeout=2) as http:
            started = time.monotonic()
            readings = await read_engines(http, engines)
            took = time.monotonic() - started
    assert [(r.name, r.engine_up, r.metrics) for r in readings] == [
        ("hung0", False, None), ("hung1", False, None), ("plain", True, None), ("gone", False, None)]
    assert took < 3.5, f"{took:.1f} s: the engines were read one after the other"


@pytest.mark.parametrize("accept, lang, title", [("zh-CN,zh;q=0.9,en;q=0.8", "zh-CN", "实时面板"),
                                                 ("en-US,en;q=0.9", "en", "ernie-chat live"),
                                                 (None, "en", "ernie-chat live")])
def test_the_page_speaks_the_browsers_language(accept, lang, title):
    html = page_html(lang_of(accept))
    assert f'<html lang="{lang}">' in html and title in html
    assert "__" not in html, "a placeholder was left in the page"


# --- the routes, in a running app ------------------------------------------------------------

@pytest.fixture(scope="module")
def app_on_plain_server(tmp_path_factory):
    with openai_standin.running("plain", 4096) as url:
        yield from start_app(tmp_path_factory.mktemp("live-plain"), engine_url=url, max_tokens=64)


@pytest.fixture(scope="module")
def app_with_login(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live-login")
    yield from start_app(tmp, engine_url=f"http://127.0.0.1:{free_port()}", chat_db=tmp / "chats.db",
                         users=f"alice:{hash_password('wonderland', rounds=4)}")


def test_the_routes_are_served_before_chainlits_catch_all(app_on_plain_server):
    page = httpx.get(f"{app_on_plain_server.app_url}{PAGE}", timeout=10)
    assert page.status_code == 200 and "window.LIVE" in page.text  # not Chainlit's index.html
    chinese = httpx.get(f"{app_on_plain_server.app_url}{PAGE}", timeout=10,
                        headers={"accept-language": "zh-CN,zh;q=0.9"})
    assert "实时面板" in chinese.text and "ernie-chat live" not in chinese.text
    script = httpx.get(f"{app_on_plain_server.app_url}/live/live.js", timeout=10)
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    data = httpx.get(f"{app_on_plain_server.app_url}{DATA}", timeout=10).json()
    assert data["metrics"] is False and data["engine_up"] is True
    assert data["server"] == app_on_plain_server.engine_url
    assert "window.LIVE" not in httpx.get(f"{app_on_plain_server.app_url}/thread/x", timeout=10).text


@pytest.mark.parametrize("asked", ["../../etc/passwd", "<img src=x onerror=alert(1)>"])
def test_a_name_no_model_has_is_never_echoed_and_brings_the_notice(app_on_plain_server, asked):
    page = httpx.get(f"{app_on_plain_server.app_url}{PAGE}", params={"model": asked}, timeout=10)
    assert page.status_code == 200 and '"unknown_model": true' in page.text
    assert asked not in page.text and "onerror" not in page.text
    data = httpx.get(f"{app_on_plain_server.app_url}{DATA}", params={"model": asked}, timeout=10)
    assert data.json()["unknown_model"] is True and len(data.json()["models"]) == 1
    assert asked not in data.text and "onerror" not in data.text


def test_with_login_on_the_data_need_the_chats_login(app_with_login):
    url = app_with_login.app_url
    assert httpx.get(f"{url}{DATA}", timeout=10).status_code == 401
    assert httpx.get(f"{url}{PAGE}", timeout=10).status_code == 200  # the empty page says "log in"
    with httpx.Client(timeout=10) as http:
        form = {"username": "alice", "password": "wonderland"}
        assert http.post(f"{url}/login", data=form).status_code == 200
        data = http.get(f"{url}{DATA}")
    assert data.status_code == 200 and data.json()["engine_up"] is False


# --- in the browser -----------------------------------------------------------------------

def tile(page, name) -> float:
    value = page.locator(f"#{name}").get_attribute("data-value")
    return float(value) if value else -1.0


@pytest.mark.browser
def test_without_metrics_the_page_says_so_and_still_counts_replies(app_on_plain_server):
    from playwright.sync_api import sync_playwright

    from tests.test_browser import ASSISTANT, CHROMIUM, CHROMIUM_ARGS
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            live = browser.new_page(locale="en-US")
            live.goto(f"{app_on_plain_server.app_url}{PAGE}")
            live.get_by_text("This server has no vLLM /metrics").wait_for(timeout=10_000)
            chat = browser.new_page(locale="en-US")
            chat.goto(app_on_plain_server.app_url)
            chat.locator(ASSISTANT).first.wait_for(timeout=60_000)
            chat.locator("#chat-input").fill("hello")
            chat.keyboard.press("Enter")
            live.wait_for_function("document.querySelector('#ttft').dataset.value >= 1", timeout=30_000)
            assert re.search(r"\d+ ms · [\d.]+ tok/s", live.locator("#ttft-list").inner_text())
            assert live.locator("#kv .value").inner_text() == "–"
        finally:
            browser.close()


@pytest.mark.engine
@pytest.mark.browser
def test_the_figures_move_while_a_chat_replies(chat_app, tmp_path):
    from playwright.sync_api import sync_playwright

    from tests.test_browser import ASSISTANT, CHROMIUM, CHROMIUM_ARGS
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            chat = browser.new_page(locale="en-US", viewport={"width": 1100, "height": 800})
            chat.goto(chat_app.app_url)
            welcome = chat.locator(ASSISTANT).first
            welcome.wait_for(timeout=60_000)
            assert "served by vLLM at http" in welcome.inner_text()
            assert "counted exactly by vLLM" in welcome.inner_text()
            link = welcome.get_by_role("link", name="Live view")
            assert link.get_attribute("href") == PAGE

            live = browser.new_page(locale="en-US", viewport={"width": 1280, "height": 720})
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

            chinese = browser.new_page(locale="zh-CN")
            chinese.goto(f"{chat_app.app_url}{PAGE}")
            assert chinese.title() == "ernie-chat 实时面板"
            assert chinese.locator("#tokens h2").inner_text() == "每秒 token 数"
        finally:
            browser.close()


# --- several models: two real vLLMs (tests/test_model_choice_stack.py's) ----------------------

def logged_in(http: httpx.Client) -> str:
    """Log ``http`` in as alice (two_models' user); its cookie header, for a raw chat socket."""
    assert http.post("/login", data={"username": "alice", "password": "wonderland"}).status_code == 200
    return "; ".join(f"{k}={v}" for k, v in http.cookies.items())


@pytest.mark.engine
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


@pytest.mark.engine
@pytest.mark.browser
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
