"""The chat against a real OpenAI-compatible server that is not vLLM: ``transformers serve``.

Hugging Face transformers' own server is already in the engine environment (vLLM needs
transformers); it serves the demo model on the CPU with streamed chat completions, but no
/tokenize, no /metrics, no window in /v1/models, and, pinned to one model, an EMPTY
/v1/models list: the chat must send the configured name, estimate its prompts, fit them
into ERNIE_CONTEXT_WINDOW and say all that.  It needs ``accelerate`` (pure Python), which
the fixture adds beside the environment, pinned, without touching the environment itself.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from app.engine.server_info import read_metrics
from server.paths import ROOT
from tests.support.settings import start_app
from tests.support.openai_standin import wait_until_serving
from tests.support.browser import ASSISTANT, ask, open_chat
from tests.support.chat import probed
from server.stack.processes import free_port

ACCELERATE = "accelerate==1.15.0"
WINDOW = 256
REPLY = 16


def accelerate_dir(engine_python: Path) -> Path:
    target = ROOT / ".cache" / ACCELERATE.replace("==", "-")
    if not (target / "accelerate").is_dir():
        subprocess.run([str(engine_python), "-m", "pip", "install", "--quiet", "--no-deps",
                        "--target", str(target), ACCELERATE], check=True)
    return target


@pytest.fixture(scope="module")
def transformers_server(engine_python, demo_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("transformers")
    (tmp / "hub").mkdir()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(accelerate_dir(engine_python)),
           "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp / "hub")}
    with open(tmp / "serve.log", "wb") as log:
        proc = subprocess.Popen([str(engine_python.with_name("transformers")), "serve", "--device",
                                 "cpu", "--host", "127.0.0.1", "--port", str(port), str(demo_model)],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(f"{url}/health", proc, 300,
                           lambda: (tmp / "serve.log").read_text(errors="replace")[-2000:])
        yield url, str(demo_model)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def test_an_empty_model_list_means_the_configured_name_and_estimates(transformers_server):
    url, model = transformers_server
    assert httpx.get(f"{url}/v1/models", timeout=10).json()["data"] == []
    server = await probed(url, served_model_name=model, context_window=WINDOW)
    assert (server.kind, server.model, server.counting) == ("other", model, "estimate")
    assert (server.window, server.window_source) == (WINDOW, "setting")
    async with httpx.AsyncClient(timeout=10) as http:
        assert await read_metrics(http, url) is None


@pytest.fixture(scope="module")
def chat_on_transformers(transformers_server, tmp_path_factory):
    url, model = transformers_server
    yield from start_app(tmp_path_factory.mktemp("on-transformers"), engine_url=url,
                         served_model_name=model, context_window=WINDOW, max_tokens=REPLY)


def test_the_chat_streams_from_transformers_serve_and_fits_its_window(
        page_factory, chat_on_transformers, transformers_server):
    url, _ = transformers_server
    page = open_chat(page_factory, chat_on_transformers)
    welcome = page.locator(ASSISTANT).first.inner_text()
    assert f"an OpenAI-compatible server at {url}" in welcome and "vLLM" not in welcome
    assert f"{WINDOW} tokens, from ERNIE_CONTEXT_WINDOW" in welcome and "estimated" in welcome
    reply = ask(page, "Tell me about tea.")
    assert re.search(r"\d+ ms to first token · [\d.]+ tok/s · \d+ prompt \+ \d+ reply tokens",
                     reply), reply
    # Past the window: the oldest exchanges are left out, counted by the estimate alone.
    for i in range(6):
        ask(page, f"Question {i}: what should I pack for a long trip to the mountains in winter?")
    page.get_by_text("were left out of this request").first.wait_for(timeout=10_000)
    assert "Traceback" not in page.content() and "Error" not in page.locator(ASSISTANT).last.inner_text()
