"""Warm the engine up with requests like the app's, before the chat URL is printed.

vLLM compiles some kernels only when a request first needs them.  On the H200
the first chats after a start waited 3.7-5.5 s for their first token while
vLLM compiled its top-p sampling kernel ("Triton kernel JIT compilation during
inference: _topk_topp_kernel"): only requests that send top_p hit it, and the
kernel is specialised by batch size (it runs for 8 or more such requests in one
step, with separate variants for sizes that are and are not multiples of 16;
docs/performance.md, "The first requests after a start").  So each engine copy
gets what the app will send, in bursts of those sizes: streamed chat completions with the app's
sampling settings, and /tokenize with the chat template, which the app calls
for the first message of a process.

Batches of more than 64 top-p requests take yet another variant (vLLM's
``topk_topp_triton.py``: ``SPLIT_COVERS_PONLY`` only up to ``_SPLIT_MAX_BATCH`` = 64).
The first crowd on a fresh H200 (256 chats at once, the Triton cache empty) got
every first token 3.1 s late, all within 5 ms of each other; with bursts above 64 in the
warm-up, the next fresh machine's first 256 chats got TTFT p50 / p99 0.48 / 0.64 s
(docs/performance.md, "The first requests after a start").  On a GPU two bursts above 64 cover
it.  The CPU build has no Triton; there the warm-up stays short.

A model started on demand (server/stack/on_demand.py) is warmed up once it serves, the same
way; the chat that woke it does not wait for that: its one request needs none of these
kernels, the crowd after it does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional

import httpx

from server.settings import Settings, auth_headers

# 1 request, then bursts that land in one scheduler step: a size below 16 and one of 16.
BURSTS = (1, 9, 16)
# On a GPU, a crowd's batches too: above 64, not a multiple of 16, and one.
CROWD_BURSTS = (72, 80)
WARMUP_TOKENS = 8
WARMUP_TIMEOUT_S = 120.0


async def one_chat(http: httpx.AsyncClient, url: str, model: str, settings: Settings, n: int) -> None:
    body = {"model": model, "stream": True, "max_tokens": WARMUP_TOKENS,
            "temperature": settings.temperature, "top_p": settings.top_p,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": settings.system_prompt},
                         {"role": "user", "content": f"Warm-up {n}: say hello."}]}
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for _ in response.aiter_lines():
            pass


def bursts(device: str) -> tuple[int, ...]:
    return BURSTS + (CROWD_BURSTS if device == "cuda" else ())


async def warm_copy(url: str, model: str, settings: Settings, sizes: tuple[int, ...]) -> int:
    """Every kind of request the app sends, to one copy; returns how many were sent."""
    async with httpx.AsyncClient(timeout=WARMUP_TIMEOUT_S,
                                 headers=auth_headers(settings.api_key_value)) as http:
        tokenize = await http.post(f"{url}/tokenize", json={
            "model": model, "add_generation_prompt": True,
            "messages": [{"role": "user", "content": "Warm-up: how many tokens is this?"}]})
        tokenize.raise_for_status()
        sent = 1
        for size in sizes:
            await asyncio.gather(*(one_chat(http, url, model, settings, sent + i) for i in range(size)))
            sent += size
    return sent


def wanted(settings: Settings) -> bool:
    """Whether `up` warms its engines: ERNIE_WARMUP, where the copies answer HTTP (not on a
    headless node)."""
    return settings.warmup and settings.node_role == "head"


def warm_tier(tier, out: Callable[[str], None] = print) -> Optional[float]:
    """``run`` on every copy of ``tier`` (server/stack/engine_tier.py's EngineTier), which serves."""
    return run(tier.settings, [engine.url for engine in tier.engines], tier.info, tier.device, out)


def run(settings: Settings, urls: list[str], info, device: str,
        out: Callable[[str], None] = print) -> Optional[float]:
    """Warm every copy up at once; print how long it took. A failure is reported, not raised:
    the engine serves anyway, the first users just wait longer."""
    started = time.perf_counter()
    model = info.model if info else settings.served_model_name

    async def all_copies() -> list[int]:
        return await asyncio.gather(*(warm_copy(url, model, settings, bursts(device)) for url in urls))
    try:
        counts = asyncio.run(all_copies())
    except (httpx.HTTPError, OSError) as exc:
        out(f"[warm-up] skipped after an error ({type(exc).__name__}: {exc}); the first chats "
            "may wait for run-time compilation")
        return None
    took = time.perf_counter() - started
    out(f"[warm-up] {sum(counts)} requests like the app's (streaming, temperature "
        f"{settings.temperature:g}, top_p {settings.top_p:g}, /tokenize) to {len(urls)} engine "
        f"cop{'y' if len(urls) == 1 else 'ies'} in {took:.1f} s")
    return took
