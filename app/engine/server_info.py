"""What the chat talks to: which kind of server, its window, how it counts, its metrics.

The stack starts vLLM, but ERNIE_ENGINE_URL may name any OpenAI-compatible server
(llama.cpp's, Ollama, a hosted API).  Only vLLM has everything the chat would like
(``max_model_len`` in /v1/models, ``/tokenize`` on chat messages, ``/metrics``);
this module finds out what the server at hand has, so the chat can use the best of
it and say plainly which it uses.

The answer is shared by the chats a process opens (``app.engine.single_flight``, 30 s): asking it per chat
cost a crowd three round trips to vLLM's busy API server per chat (/v1/models and two
/tokenize probes), a third of the app's CPU for short replies in a py-spy profile
(docs/performance.md, "The app's cost per chat").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import httpx
from openai import AsyncOpenAI
from openai.types import Model

from app.engine import token_count
from app.texts import text
from server.metrics import EngineMetrics, parse_metrics, publishes_engine_stats
from server.settings import Settings, auth_headers

# Kinds, from /v1/models' owned_by (docs/notes.md, "Other OpenAI-compatible servers").
VLLM, LLAMACPP, OTHER = "vllm", "llamacpp", "other"


@dataclass(frozen=True)
class ServerInfo:
    url: str
    kind: str           # VLLM, LLAMACPP or OTHER
    model: str          # the served name requests must use
    root: str           # vLLM's served folder ("" elsewhere)
    window: int         # the context window the chat fits conversations into
    window_source: str  # "server", "setting" (ERNIE_CONTEXT_WINDOW) or "default" (ERNIE_MAX_MODEL_LEN)
    counting: str       # token_count.VLLM, LLAMACPP or ESTIMATE


def choose_window(reported: Optional[int], settings: Settings) -> tuple[int, str]:
    """The server's own window when it says one, else the operator's setting, else the default."""
    if reported:
        return reported, "server"
    if settings.context_window:
        return settings.context_window, "setting"
    return settings.max_model_len, "default"


async def llamacpp_window(http: httpx.AsyncClient, base_url: str,
                          api_key: Optional[str]) -> Optional[int]:
    """llama.cpp's per-request context (a slot's n_ctx) from GET /props."""
    try:
        response = await http.get(f"{base_url}/props", headers=auth_headers(api_key))
        response.raise_for_status()
        return int(response.json()["default_generation_settings"]["n_ctx"]) or None
    except (httpx.HTTPStatusError, KeyError, TypeError, ValueError):
        return None


def choose_model(listed: list[Model], configured: str) -> Optional[Model]:
    """The model the chat asks for: ERNIE_SERVED_MODEL_NAME when the server lists it (a
    server with several, such as Ollama), else the first listed.  None when the list is
    empty, as with ``transformers serve`` pinned to one model: then the configured name is
    sent as it is (docs/notes.md, "Other OpenAI-compatible servers")."""
    return next((m for m in listed if m.id == configured), listed[0] if listed else None)


async def probe(client: AsyncOpenAI, http: httpx.AsyncClient, settings: Settings) -> ServerInfo:
    """Ask the server what it is and offers; raises what the client raises when it is down."""
    listed = (await client.models.list()).data
    chosen = choose_model(listed, settings.served_model_name)
    extra = (chosen.model_extra or {}) if chosen else {}
    owner = ((chosen.owned_by if chosen else "") or "").lower()
    model = chosen.id if chosen else settings.served_model_name
    kind = VLLM if owner == "vllm" else LLAMACPP if owner == "llamacpp" else OTHER
    url, key = settings.engine_base_url, settings.api_key_value
    reported = int(extra.get("max_model_len") or 0) or None
    if kind == LLAMACPP:
        reported = await llamacpp_window(http, url, key)
    window, source = choose_window(reported, settings)
    counting = await token_count.detect(http, url, model, key)
    return ServerInfo(url, kind, model, str(extra.get("root") or ""), window, source, counting)


def describe(lang: str, server: ServerInfo) -> str:
    """The welcome's lines about the server: what it is, its window, how prompts are counted."""
    window = f"{server.window:,}"
    name = text(lang, f"server_{server.kind}", url=server.url)
    return (text(lang, "welcome", model=server.model, server=name)
            + "\n\n" + text(lang, f"window_{server.window_source}", window=window)
            + " " + text(lang, f"count_{server.counting}"))


async def read_metrics(http: httpx.AsyncClient, base_url: str) -> Optional[EngineMetrics]:
    """vLLM's /metrics; None when the server has none (any other server, or a refusal)."""
    response = await http.get(f"{base_url}/metrics")
    refused = response.status_code in (401, 403, 404, 405)
    if refused or (response.is_success and not publishes_engine_stats(response.text)):
        return None
    response.raise_for_status()  # a server in trouble is not a server without metrics
    return parse_metrics(response.text)
