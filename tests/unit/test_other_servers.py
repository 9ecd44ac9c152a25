"""The chat against OpenAI-compatible servers other than vLLM.

The servers here are tests/support/openai_standin.py in its own process: a plain one that
stands in for hosted APIs and Ollama (only /v1/models and streaming chat), and one
with llama.cpp's documented endpoints (llama.cpp does not install on our machines).
vLLM's side of the same code runs against the real engine (marked ``engine``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from app.engine import token_count
from app.engine.server_info import ServerInfo, choose_model, choose_window, describe
from app.engine.single_flight import SingleFlight
from server.settings import load_settings


# --- counting without the server ----------------------------------------------------------

def test_the_estimate_counts_characters_with_a_margin():
    assert token_count.estimate_text("hello world") == 4         # 11 ASCII characters / 3
    assert token_count.estimate_text("你好") == 3                 # 1.5 per other character
    assert token_count.estimate_text("") == 0
    one = [{"role": "user", "content": "hello world"}]
    two = one + [{"role": "assistant", "content": "hi"}]
    assert token_count.estimate_tokens(one) == 4 + 4 + 3         # text + per message + reply primer
    assert token_count.estimate_tokens(two) > token_count.estimate_tokens(one)


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
