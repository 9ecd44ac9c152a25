"""Two real vLLMs behind one app (ERNIE_MODELS), and what their own /metrics say."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

from server.paths import ROOT
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from tests.support.metrics import metric
from tests.support.settings import TEST_MAX_MODEL_LEN, engine_settings, start_app

SMALL_WINDOW = 1024
REPLY_TOKENS = 16
REQUESTS = "vllm:request_success_total"


@dataclass(frozen=True)
class EnginePair:
    """Engines A on ``port`` and B on ``port`` + 1, as ERNIE_MODELS' second model is found."""
    port: int
    urls: list[str]
    names: tuple[str, str]
    models: str  # ERNIE_MODELS naming both, with their windows


def two_engines(first: Path, second: Path, tmp: Path) -> Iterator[EnginePair]:
    """Engines A (``first``, 4096 tokens) on P and B (``second``, 1024 tokens) on P + 1."""
    port = free_port(2)
    stacks = []
    try:
        for folder, window, at in ((first, TEST_MAX_MODEL_LEN, port), (second, SMALL_WINDOW, port + 1)):
            settings = engine_settings(tmp / f"engine-{folder.name}", model=str(folder), served_model_name=folder.name,
                                       engine_port=at, max_model_len=window)
            stacks.append(Stack(settings, root=ROOT))
            stacks[-1].start_engine()
        yield EnginePair(port, [stack.settings.engine_base_url for stack in stacks], (first.name, second.name),
                         f"{first}:{TEST_MAX_MODEL_LEN},{second}:{SMALL_WINDOW}")
    finally:
        for stack in stacks:
            stack.stop()


def app_on(pair: EnginePair, tmp: Path, **app_settings):
    """The app with ERNIE_MODELS on both engines, saved chats, login and ``app_settings``; yields
    (app settings, [A's URL, B's URL], (A's name, B's name))."""
    for app in start_app(tmp / "app", models=pair.models, engine_port=pair.port, kv_cache_gib=None,
                         ignore_eos=True, chat_db=tmp / "chats.db", users="alice:wonderland", **app_settings):
        yield app, pair.urls, pair.names


def requests_of(urls: list[str]) -> list[float]:
    return [metric(url, REQUESTS) for url in urls]


def requests_when(urls: list[str], expected: list[float]) -> list[float]:
    """The engines' finished requests once they are ``expected`` or 10 s passed: vLLM counts a
    request a moment after its last token has gone out."""
    deadline = time.monotonic() + 10
    while (now := requests_of(urls)) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


def long_text(url: str, model: str, tokens: int) -> str:
    """A message of about ``tokens`` tokens for the model, as its engine counts them."""
    words = "weather " * tokens
    while True:
        answer = httpx.post(f"{url}/tokenize", json={"model": model, "prompt": words}, timeout=30)
        counted = answer.json()["count"]
        if counted <= tokens:
            return words
        words = words[: len(words) * tokens // counted]
