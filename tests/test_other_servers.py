"""The chat against OpenAI-compatible servers other than vLLM.

The servers here are tests/openai_standin.py in its own process: a plain one that
stands in for hosted APIs and Ollama (only /v1/models and streaming chat), and one
with llama.cpp's documented endpoints (llama.cpp does not install on our machines).
vLLM's side of the same code runs against the real engine (marked ``engine``).
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx
import pytest

from app.engine import token_count
from app.engine.engine_client import count_tokens, make_client
from app.engine.server_info import ServerInfo, choose_model, choose_window, describe, probe, read_metrics
from app.engine.single_flight import SingleFlight
from server.settings import load_settings
from tests import openai_standin
from tests.conftest import ROOT, start_app

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


# --- counting without the server ----------------------------------------------------------

def test_the_estimate_counts_characters_with_a_margin():
    assert token_count.estimate_text("hello world") == 4         # 11 ASCII characters / 3
    assert token_count.estimate_text("你好") == 3                 # 1.5 per other character
    assert token_count.estimate_text("") == 0
    one = [{"role": "user", "content": "hello world"}]
    two = one + [{"role": "assistant", "content": "hi"}]
    assert token_count.estimate_tokens(one) == 4 + 4 + 3         # text + per message + reply primer
    assert token_count.estimate_tokens(two) > token_count.estimate_tokens(one)


def corpus_conversations() -> list[list[dict]]:
    """Exchanges of the demo model's corpus (English and Chinese) as chat messages."""
    text = (ROOT / "server" / "stack" / "demo_corpus.txt").read_text(encoding="utf-8")
    pairs = re.findall(r"User: (.+)\nAssistant: (.+)", text)
    return [[{"role": "user", "content": u}, {"role": "assistant", "content": a}]
            for u, a in pairs[::25]]


@pytest.mark.engine
async def test_the_estimate_is_above_the_exact_count_but_not_far(engine):
    """Against vLLM's exact count (the demo model's tokenizer) on the corpus' exchanges."""
    settings, _ = engine
    ratios = []
    async with httpx.AsyncClient(timeout=10) as http:
        for messages in corpus_conversations():
            exact = await count_tokens(http, settings.engine_base_url, settings.served_model_name, messages)
            ratios.append(token_count.estimate_tokens(messages) / exact)
    print(f"estimate / exact over {len(ratios)} exchanges: min {min(ratios):.2f}, "
          f"median {sorted(ratios)[len(ratios) // 2]:.2f}, max {max(ratios):.2f}")
    assert min(ratios) >= 1.0, "the estimate under-counted: the server would refuse the request"
    # The demo tokenizer learned these very lines, so it packs some of them (Chinese ones
    # above all) tighter than a real tokenizer packs chat text: bound the typical waste.
    assert sorted(ratios)[len(ratios) // 2] <= 2.0, "the estimate wastes half the window"


# --- finding out what the server offers ----------------------------------------------------

def test_the_window_is_the_servers_else_the_setting_else_the_default():
    assert choose_window(4096, load_settings(context_window=1000)) == (4096, "server")
    assert choose_window(None, load_settings(context_window=1000)) == (1000, "setting")
    assert choose_window(None, load_settings(max_model_len=2048)) == (2048, "default")


def test_the_model_is_the_configured_one_when_listed_else_the_first():
    from openai.types import Model
    listed = [Model(id=name, created=0, object="model", owned_by="x") for name in ("a", "b")]
    assert choose_model(listed, "b").id == "b"      # Ollama lists every model it has
    assert choose_model(listed, "zzz").id == "a"
    assert choose_model([], "b") is None            # transformers serve lists none


class Probes:
    """Stands in for server_info.probe: counts its calls, answers after a tick or fails."""

    def __init__(self) -> None:
        self.calls, self.fail = 0, False

    async def __call__(self) -> ServerInfo:
        self.calls += 1
        await asyncio.sleep(0.01)
        if self.fail:
            raise ConnectionError("engine down")
        return ServerInfo("u", "vllm", f"m{self.calls}", "", 100, "server", token_count.VLLM)


async def test_chats_opening_together_share_one_probe_and_a_stopped_one_does_not_end_it():
    probes, shared = Probes(), SingleFlight(max_age_s=30)
    waiters = [asyncio.ensure_future(shared.get(probes)) for _ in range(50)]
    await asyncio.sleep(0)
    waiters[0].cancel()  # a chat stopped while it waits
    answers = await asyncio.gather(*waiters[1:])
    assert probes.calls == 1 and {a.model for a in answers} == {"m1"}
    assert (await shared.get(probes)).model == "m1" and probes.calls == 1


async def test_the_shared_answer_ages_and_a_failure_or_forget_asks_again():
    now = [0.0]
    probes, shared = Probes(), SingleFlight(max_age_s=30, clock=lambda: now[0])
    assert (await shared.get(probes)).model == "m1"
    now[0] = 31.0
    assert (await shared.get(probes)).model == "m2"
    shared.forget()
    probes.fail = True
    with pytest.raises(ConnectionError):
        await shared.get(probes)
    probes.fail = False
    assert (await shared.get(probes)).model == "m4", "a failed probe is not kept"


async def probed(url, **overrides) -> ServerInfo:
    settings = load_settings(engine_url=url, **overrides)
    async with httpx.AsyncClient(timeout=10) as http:
        return await probe(make_client(settings), http, settings)


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


@pytest.mark.parametrize("kind, counting, source, says", [
    ("vllm", "vllm", "server", ["vLLM at http://h:1", "as the server reports", "exactly by vLLM"]),
    ("llamacpp", "llamacpp", "server", ["llama.cpp's server at http://h:1", "llama.cpp's tokenizer"]),
    ("other", "estimate", "setting", ["an OpenAI-compatible server at http://h:1",
                                      "from ERNIE_CONTEXT_WINDOW", "estimated"]),
    ("other", "estimate", "default", ["assumed 8,192 tokens", "set ERNIE_CONTEXT_WINDOW"]),
])
def test_the_welcome_names_the_server_and_how_it_counts(kind, counting, source, says):
    info = ServerInfo("http://h:1", kind, "m", "", 8192, source, counting)
    welcome = describe("en", info)
    for phrase in says:
        assert phrase in welcome
    assert ("vLLM" in welcome) == (kind == "vllm")
    assert "8,192" in describe("zh", info) and "http://h:1" in describe("zh", info)


# --- the chat in a browser, against the plain server --------------------------------------

@pytest.fixture(scope="module")
def chat_on_plain_server(plain_server, tmp_path_factory):
    yield from start_app(tmp_path_factory.mktemp("plain"), engine_url=plain_server,
                         context_window=WINDOW, max_tokens=24, ignore_eos=True)


@pytest.mark.browser
def test_the_chat_works_against_a_plain_server_and_says_what_it_does(chat_on_plain_server, plain_server):
    from playwright.sync_api import sync_playwright

    from tests.test_browser import ASSISTANT, CHROMIUM, CHROMIUM_ARGS
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(locale="en-US")
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
        finally:
            browser.close()
    seen = httpx.get(f"{plain_server}/standin/requests", timeout=5).json()
    assert [r["status"] for r in seen] == [200] * len(seen), seen
    # vLLM's own fields stay with vLLM: transformers serve, for one, refuses them (HTTP 422).
    assert not any({"ignore_eos", "stream_interval"} & set(r["fields"]) for r in seen), seen
    assert max(r["prompt_tokens"] for r in seen) + 24 <= WINDOW
