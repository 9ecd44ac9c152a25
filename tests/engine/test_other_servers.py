"""The chat against OpenAI-compatible servers other than vLLM: tests/support/openai_standin.py
in its own process, a plain one (as hosted APIs and Ollama) and one with llama.cpp's
endpoints (llama.cpp does not install on our machines); the chat against the plain one in a
real Chromium."""

from __future__ import annotations

import re

import httpx
import pytest

from app.engine import token_count
from app.engine.server_info import read_metrics
from tests.support import openai_standin
from tests.support.settings import start_app
from tests.support.chat import probed
from tests.support.browser import ASSISTANT

WINDOW = 240


@pytest.fixture(scope="module")
def plain_server():
    # 500 tokens/s: fast enough that the app would ask vLLM to group tokens (stream_interval).
    with openai_standin.running("plain", WINDOW, seconds_per_token=0.002) as url:
        yield url


@pytest.fixture(scope="module")
def llamacpp_server():
    with openai_standin.running("llamacpp", WINDOW) as url:
        yield url


async def test_a_plain_server_gets_estimates_and_the_configured_window(plain_server):
    server = await probed(plain_server, context_window=1000)
    assert (server.kind, server.counting) == ("other", "estimate")
    assert (server.model, server.window, server.window_source) == ("standin-model", 1000, "setting")
    assert (await probed(plain_server)).window_source == "default"
    async with httpx.AsyncClient(timeout=10) as http:
        assert await read_metrics(http, plain_server) is None


async def test_llamacpp_counts_with_its_template_and_tokenizer_and_reports_its_window(llamacpp_server):
    server = await probed(llamacpp_server, context_window=1000)
    assert (server.kind, server.counting) == ("llamacpp", "llamacpp")
    assert (server.window, server.window_source) == (WINDOW, "server")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "one two three"}]
    async with httpx.AsyncClient(timeout=10) as http:
        counted = await token_count.counter(http, llamacpp_server, server.model, server.counting)(messages)
    assert counted == openai_standin.count(messages)


# --- the chat in a browser, against the plain server --------------------------------------

@pytest.fixture(scope="module")
def chat_on_plain_server(plain_server, tmp_path_factory):
    yield from start_app(tmp_path_factory.mktemp("plain"), engine_url=plain_server,
                         context_window=WINDOW, max_tokens=24, ignore_eos=True)


def test_the_chat_works_against_a_plain_server_and_says_what_it_does(chat_on_plain_server, plain_server, new_page):
    page = new_page(locale="en-US")
    page.goto(chat_on_plain_server.app_url)
    welcome = page.locator(ASSISTANT).first
    welcome.wait_for(timeout=60_000)
    said = welcome.inner_text()
    assert f"an OpenAI-compatible server at {plain_server}" in said and "vLLM" not in said
    assert f"{WINDOW} tokens, from ERNIE_CONTEXT_WINDOW" in said and "estimated" in said

    def ask(message):
        before = page.locator(ASSISTANT).count()
        page.locator("#chat-input").fill(message)
        page.keyboard.press("Enter")
        page.locator(ASSISTANT).nth(before).wait_for(timeout=30_000)
        page.locator("#stop-button").wait_for(state="detached", timeout=30_000)
        return page.locator(ASSISTANT).last.inner_text()

    reply = ask("Tell me about the weather in Paris tomorrow, please.")
    assert "word0 word1" in reply and re.search(r"\d+ prompt \+ 24 reply tokens", reply), reply
    assert "has no vLLM /metrics" in ask("/status")
    # Longer than the window: the oldest exchanges are left out, by the estimate alone.
    for i in range(4):
        ask(f"Question number {i}: what should I pack for a trip to the mountains?")
    page.get_by_text("were left out of this request").first.wait_for(timeout=10_000)
    assert "404 Not Found" not in page.content() and "Traceback" not in page.content()
    seen = httpx.get(f"{plain_server}/standin/requests", timeout=5).json()
    assert [r["status"] for r in seen] == [200] * len(seen), seen
    # vLLM's own fields stay with vLLM: transformers serve, for one, refuses them (HTTP 422).
    assert not any({"ignore_eos", "stream_interval"} & set(r["fields"]) for r in seen), seen
    assert max(r["prompt_tokens"] for r in seen) + 24 <= WINDOW
