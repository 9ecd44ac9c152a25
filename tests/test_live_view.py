"""The live view for presenters: its figures, its routes, and the page in a real Chromium."""

from __future__ import annotations

import re

import httpx
import pytest

from app.engine_client import ReplyStats
from app.live_stats import MIN_RATE_INTERVAL_S, LiveStats
from app.live_view import DATA, PAGE, page_html
from app.texts import lang_of
from server.metrics import EngineMetrics
from server.passwords import hash_password
from server.stack.processes import free_port
from tests.screenshots import screenshot_path
from tests import openai_standin
from tests.conftest import start_app



def metrics(generated: int, running=1, waiting=0, kv=0.25) -> EngineMetrics:
    return EngineMetrics(kv_cache_usage=kv, running=running, waiting=waiting, preemptions=0,
                         kv_cache_tokens=1000, prompt_tokens=10, generation_tokens=generated)


def test_rates_come_from_two_readings_and_close_readings_reuse_the_last():
    live = LiveStats()
    assert live.rate("engine", 100, now=10.0) == 0.0           # one reading: no rate yet
    assert live.rate("engine", 300, now=12.0) == 100.0         # 200 tokens in 2 s
    assert live.rate("engine", 310, now=12.0 + MIN_RATE_INTERVAL_S / 2) == 100.0
    assert live.rate("engine", 5, now=20.0) == 0.0             # the counter went back: a restart


async def test_track_counts_pieces_and_records_each_reply_that_began():
    live = LiveStats()

    async def reply(stats, n):
        stats.first_token_at = stats.started + 0.25
        for i in range(n):
            yield f"w{i} "
        stats.finished_at, stats.completion_tokens = stats.first_token_at + 1.0, n

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
    live = LiveStats()
    live.snapshot(10.0, metrics(1000), chats=2)
    engine = live.snapshot(11.0, metrics(1400, running=3, waiting=2), chats=2)
    assert (engine["tokens_per_s"], engine["running"], engine["waiting"]) == (400.0, 3, 2)
    assert engine["kv_cache_pct"] == 25.0 and engine["metrics"] and engine["chats"] == 2
    live.pieces = 50
    live.snapshot(20.0, None, chats=1)
    live.pieces = 80
    plain = live.snapshot(22.0, None, chats=1)
    assert plain["tokens_per_s"] == 15.0 and not plain["metrics"]
    assert plain["running"] is None and plain["kv_cache_pct"] is None


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
