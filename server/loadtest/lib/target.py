"""The server under load: which model it serves, and its own counters before and after.

vLLM's /metrics times a request from the moment it is tokenized, so the engine's
view next to the client's splits a request's time between the engine and the
HTTP front end, which decides whether tuning the engine can help at all.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Optional

import httpx

from server.loadtest.lib.config import BenchConfig, BenchError
from server.loadtest.lib.stats import LevelSummary
from server.settings import auth_headers

if TYPE_CHECKING:  # server.metrics needs prometheus_client: imported when /metrics is read
    from server.metrics import EngineMetrics

LOOPBACK_HOSTS = {"localhost", "::1", "[::1]"}
PREFIX_HIT_WARNING = 0.10  # of the prompt tokens, during a level


def check_target(url: str, explicit: bool) -> None:
    """Load only this machine, unless the person names another server with --url."""
    host = httpx.URL(url).host
    if explicit or host in LOOPBACK_HOSTS or host.startswith("127."):
        return
    raise BenchError(f"The configured engine ({url}) is not on this machine. A load test "
                     f"sends it real traffic: pass --url {url} to mean it.")


def error_message(body: bytes) -> str:
    """The message of an OpenAI error body, else the start of the body."""
    try:
        data = json.loads(body)
        error = data.get("error", data)
        return str(error.get("message", error) if isinstance(error, dict) else error)[:300]
    except (ValueError, AttributeError):
        return body[:300].decode("utf-8", errors="replace")


async def served_model(http: httpx.AsyncClient, cfg: BenchConfig) -> tuple[str, Optional[int]]:
    """(model name to send, the server's max_model_len if it says) from /v1/models."""
    try:
        response = await http.get(f"{cfg.url}/v1/models", headers=auth_headers(cfg.api_key))
    except httpx.HTTPError as exc:
        raise BenchError(f"No server answers at {cfg.url} ({type(exc).__name__}: {exc}). "
                         "Start it (./scripts/up) or pass --url.") from None
    if response.status_code == 401:
        raise BenchError(f"{cfg.url} refused the API key sent (HTTP 401); the key was "
                         f"{cfg.api_key_from or ('given' if cfg.api_key else 'none')}. Pass the "
                         "engine's key with --api-key or ERNIE_API_KEY.")
    if response.status_code != 200:
        raise BenchError(f"{cfg.url}/v1/models answered HTTP {response.status_code}: "
                         f"{error_message(response.content)}")
    models = response.json().get("data") or []
    entry = next((m for m in models if m.get("id") == cfg.model), models[0] if models else {})
    if cfg.model and entry.get("id") != cfg.model:
        raise BenchError(f"{cfg.url} does not serve {cfg.model!r}; it serves "
                         f"{[m.get('id') for m in models]}.")
    if not entry:
        raise BenchError(f"{cfg.url}/v1/models lists no model.")
    return entry["id"], entry.get("max_model_len")


async def server_counters(cfg: BenchConfig) -> Optional[EngineMetrics]:
    """vLLM's own counters (server.metrics.EngineMetrics); None without its /metrics."""
    try:
        from server.metrics import fetch_metrics_async
        async with httpx.AsyncClient(timeout=5.0, headers=auth_headers(cfg.api_key)) as http:
            return await fetch_metrics_async(http, cfg.url)
    except (ImportError, httpx.HTTPError, ValueError):
        return None


def add_server_view(summary: LevelSummary, before: Optional[EngineMetrics],
                    after: Optional[EngineMetrics]) -> None:
    """What the engine itself measured during a level: prefix-cache hits, its latencies and
    how many speculative draft tokens it accepted.

    Next to the client's figures they split a request's time between the engine and the
    HTTP front end, which is what decides whether tuning the engine can help.
    """
    if before is None or after is None:
        return
    from server.metrics import acceptance_between, mean_between
    to_ms = lambda s: None if s is None else s * 1000
    summary.prefix_cache_hit_rate = hit_rate(
        (before.prefix_cache_queries, before.prefix_cache_hits),
        (after.prefix_cache_queries, after.prefix_cache_hits))
    summary.server_ttft_ms_mean = to_ms(mean_between(before.ttft, after.ttft))
    summary.server_e2e_ms_mean = to_ms(mean_between(before.e2e, after.e2e))
    summary.server_queue_ms_mean = to_ms(mean_between(before.queue, after.queue))
    summary.spec_acceptance_rate, summary.spec_acceptance_length = acceptance_between(before, after)


def mostly_cached(summary: LevelSummary) -> bool:
    """Whether the prefix cache served so many prompt tokens that TTFT is a cached prompt's."""
    return (summary.prefix_cache_hit_rate or 0) > PREFIX_HIT_WARNING


def hit_rate(before: Optional[tuple[int, int]], after: Optional[tuple[int, int]]) -> Optional[float]:
    """The share of prompt tokens served from the prefix cache between two readings."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])
