"""How long a prompt is, counted with the best source the server offers.

- ``vllm``: vLLM's ``POST /tokenize`` takes the chat messages and applies the
  model's own template: exact.
- ``llamacpp``: llama.cpp's server applies its template (``POST /apply-template``)
  and tokenizes the result (``POST /tokenize {"content"}``): exact up to a BOS.
- ``estimate``: any other server (hosted APIs, Ollama): a character count that
  over-counts ordinary text on purpose (docs/notes.md, "Counting tokens
  without the server"), so history is left out a little early rather than the
  server refusing the request.

Which one a server offers is found by asking it (``detect``), not by its name:
a proxy in front of vLLM may or may not pass /tokenize through.
"""

from __future__ import annotations

import math
from typing import Awaitable, Callable, Optional

import httpx

from app.engine.engine_client import count_tokens as count_with_vllm
from server.settings import auth_headers

VLLM, LLAMACPP, ESTIMATE = "vllm", "llamacpp", "estimate"

# A prompt's length in tokens, as chat messages.
Counter = Callable[[list[dict]], Awaitable[int]]

# The estimate: ASCII text runs about 4 characters per token in common tokenizers,
# Chinese about 1 token per character; these figures count more than that.
ASCII_CHARS_PER_TOKEN = 3
OTHER_TOKENS_PER_CHAR = 1.5
# Role markers and separators the chat template adds per message, and before the reply.
TOKENS_PER_MESSAGE = 4
REPLY_PRIMER_TOKENS = 3
_PROBE = [{"role": "user", "content": "hi"}]


def estimate_text(text: str) -> int:
    ascii_chars = sum(1 for c in text if ord(c) < 128)
    return math.ceil(ascii_chars / ASCII_CHARS_PER_TOKEN
                     + (len(text) - ascii_chars) * OTHER_TOKENS_PER_CHAR)


def estimate_tokens(messages: list[dict]) -> int:
    """An upper estimate of the prompt's tokens, from characters alone."""
    return REPLY_PRIMER_TOKENS + sum(TOKENS_PER_MESSAGE + estimate_text(str(m.get("content") or ""))
                                     for m in messages)


async def count_with_llamacpp(http: httpx.AsyncClient, base_url: str,
                              messages: list[dict], api_key: Optional[str] = None) -> int:
    headers = auth_headers(api_key)
    templated = await http.post(f"{base_url}/apply-template", json={"messages": messages},
                                headers=headers)
    templated.raise_for_status()
    tokens = await http.post(f"{base_url}/tokenize", headers=headers,
                             json={"content": templated.json()["prompt"], "add_special": True})
    tokens.raise_for_status()
    return len(tokens.json()["tokens"])


async def _answers(count) -> bool:
    """Does this way of counting work on the server? Any failure says no: the server has just
    answered /v1/models, so a refusal, an odd body or a dropped connection is its answer."""
    try:
        return await count(_PROBE) > 0
    except (httpx.HTTPError, KeyError, TypeError, ValueError):
        return False


async def detect(http: httpx.AsyncClient, base_url: str, model: str,
                 api_key: Optional[str] = None) -> str:
    """The best way this server offers to count a prompt: VLLM, LLAMACPP or ESTIMATE."""
    for method in (VLLM, LLAMACPP):
        if await _answers(counter(http, base_url, model, method, api_key)):
            return method
    return ESTIMATE


def counter(http: httpx.AsyncClient, base_url: str, model: str, method: str,
            api_key: Optional[str] = None) -> Counter:
    """The prompt counter app.conversation.history.fit uses, for the method ``detect`` found."""
    async def count(messages: list[dict]) -> int:
        if method == VLLM:
            return await count_with_vllm(http, base_url, model, messages, api_key)
        if method == LLAMACPP:
            return await count_with_llamacpp(http, base_url, messages, api_key)
        return estimate_tokens(messages)
    return count
