"""``ernie-chat bench --app-overhead``: what the chat app's streaming path costs a reply.

The app reads the engine through the official OpenAI client
(``app/engine/engine_client.stream_reply``) and groups tokens into websocket frames
(``app/conversation/token_batcher.TokenBatcher``); both do Python work per token.  This
times that path against the cheapest reader of the same stream, httpx on the
engine's SSE lines, on the same engine and with the same request.  The two
paths alternate (A B B A), so a change in the machine's load hits both
alike, and every run gets a prompt of its own, so the prefix cache helps none.

The app path's TTFT ends when the first text reaches the batcher's send (what
the browser would receive), so it includes the batcher's wait; the JSON also
keeps the moment the client library yielded it.  Targets: tokens/s
ratio at least 0.99, added TTFT at p50 at most 5 ms.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from contextlib import aclosing
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import AsyncIterator, Optional

import httpx
from pydantic import SecretStr

from app.conversation.token_batcher import TokenBatcher
from app.engine import engine_client as ec
from server.loadtest.lib.config import BenchConfig, BenchError
from server.loadtest.lib.prompts import prepare
from server.loadtest.lib.stream import StreamError
from server.loadtest.lib.target import error_message
from server.progress import StatusLine
from server.settings import Settings, auth_headers

MIN_TOKENS_PER_S_RATIO = 0.99
MAX_ADDED_TTFT_MS = 5.0


@dataclass
class Sample:
    path: str
    ttft_s: float             # request sent -> first text delivered
    e2e_s: float              # request sent -> stream finished
    tokens: int
    client_first_s: Optional[float] = None  # app path: first text out of the OpenAI client

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.e2e_s


async def app_path(client, model: str, messages: list[dict], settings: Settings,
                   max_tokens: int) -> Sample:
    """Exactly the app's loop (app.conversation.answer.stream_answer) with a send that does nothing."""
    first_sent: list[float] = []

    async def send(chunk: str) -> None:
        if not first_sent:
            first_sent.append(time.perf_counter())

    batcher = TokenBatcher(send)
    stats = ec.ReplyStats()
    async for piece in ec.stream_reply(client, model, messages, stats, temperature=settings.temperature,
                                       top_p=settings.top_p, max_tokens=max_tokens,
                                       extra_body={"ignore_eos": True}):
        await batcher.add(piece)
    await batcher.flush()
    end = time.perf_counter()
    return Sample("app", first_sent[0] - stats.started, end - stats.started,
                  stats.completion_tokens or 0, stats.first_token_at - stats.started)


async def sse_chunks(http: httpx.AsyncClient, url: str, body: dict,
                     headers: dict) -> AsyncIterator[dict]:
    """The JSON chunks of the engine's event stream, read with plain httpx to its end and
    decoded as the app decodes them (engine_client.sse_chunk)."""
    async with http.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            message = error_message(await response.aread())
            raise StreamError(f"HTTP {response.status_code}: {message}")
        async for line in response.aiter_lines():
            if (chunk := ec.sse_chunk(line)) is not None:
                yield chunk


async def direct_path(http: httpx.AsyncClient, cfg: BenchConfig, model: str,
                      messages: list[dict], settings: Settings, max_tokens: int) -> Sample:
    body = {"model": model, "messages": messages, "temperature": settings.temperature,
            "top_p": settings.top_p, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    first, tokens = None, 0
    started = time.perf_counter()
    chunks = sse_chunks(http, f"{cfg.url}/v1/chat/completions", body, auth_headers(cfg.api_key))
    async with aclosing(chunks):
        async for chunk in chunks:
            # The same moment as the app's: the first choice that carries text.
            texts = ((c.get("delta") or {}).get("content") for c in chunk.get("choices", []))
            if first is None and any(texts):
                first = time.perf_counter()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    if first is None:
        raise BenchError("the engine's stream carried no text")
    return Sample("direct", first - started, end - started, tokens)


def compare_paths(samples: list[Sample]) -> dict:
    """Medians of each path, and the tokens/s ratio and added TTFT over alternating pairs.

    Single replies of the demo model vary by +-15 % in tokens/s on a busy 2-core box,
    so the ratio of the two paths' medians moves by several % between runs; each app
    run divided by its neighbour direct run (the pair saw the same machine), and the
    median of those, is steadier; the quartiles show how much is left.
    """
    app = [s for s in samples if s.path == "app"]
    direct = [s for s in samples if s.path == "direct"]
    pair_ratios = sorted(a.tokens_per_s / d.tokens_per_s for a, d in zip(app, direct))
    ratio = median(pair_ratios)
    added = median((a.ttft_s - d.ttft_s) * 1000 for a, d in zip(app, direct))
    client_added = median((a.client_first_s - d.ttft_s) * 1000 for a, d in zip(app, direct))
    return {
        "repetitions": len(app),
        "app_tokens_per_s_median": median(s.tokens_per_s for s in app),
        "direct_tokens_per_s_median": median(s.tokens_per_s for s in direct),
        "tokens_per_s_ratio": ratio,
        "tokens_per_s_ratio_quartiles": [pair_ratios[len(pair_ratios) // 4],
                                         pair_ratios[(3 * len(pair_ratios)) // 4]],
        "app_ttft_ms_median": median(s.ttft_s * 1000 for s in app),
        "direct_ttft_ms_median": median(s.ttft_s * 1000 for s in direct),
        "added_ttft_ms_p50": added,
        "added_ttft_ms_p50_before_batcher": client_added,
        "targets": {"tokens_per_s_ratio": MIN_TOKENS_PER_S_RATIO,
                    "added_ttft_ms_p50": MAX_ADDED_TTFT_MS},
        "meets_targets": ratio >= MIN_TOKENS_PER_S_RATIO and added <= MAX_ADDED_TTFT_MS,
    }


async def measure(cfg: BenchConfig, settings: Settings, repetitions: int) -> dict:
    app_settings = settings.model_copy(update={
        "engine_url": cfg.url, "api_key": SecretStr(cfg.api_key) if cfg.api_key else None})
    status = StatusLine("app-overhead")
    # One run of each path to warm up, then the measured ones; every run its own prompt.
    model, _, prompts, _ = await prepare(cfg, 2 * repetitions + 2,
                                               random.Random(cfg.load.seed), status)
    client = ec.make_client(app_settings)
    try:
        async with httpx.AsyncClient(timeout=cfg.request_timeout_s) as http:
            runs = {"app": lambda m, n: app_path(client, model, m, app_settings, n),
                    "direct": lambda m, n: direct_path(http, cfg, model, m, app_settings, n)}
            samples = []
            for i, prompt in enumerate(prompts):
                order = ("app", "direct") if (i // 2) % 2 == 0 else ("direct", "app")  # A B B A
                messages = [{"role": "system", "content": settings.system_prompt},
                            {"role": "user", "content": prompt.text}]
                sample = await runs[order[i % 2]](messages, prompt.max_tokens)
                if i >= 2:
                    samples.append(sample)
                status.update(f"{i + 1}/{len(prompts)} replies")
            status.done(f"{len(samples)} measured replies")
    finally:
        await client.close()
    return {"kind": "ernie-chat app-overhead",
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "target": {"url": cfg.url, "model": model},
            "params": {**cfg.as_dict(), "repetitions": repetitions},
            "summary": compare_paths(samples),
            "samples": [{**asdict(s), "tokens_per_s": s.tokens_per_s} for s in samples]}


def render(summary: dict) -> str:
    verdict = lambda ok: "meets target" if ok else "MISSES target"
    ratio, added = summary["tokens_per_s_ratio"], summary["added_ttft_ms_p50"]
    low, high = summary["tokens_per_s_ratio_quartiles"]
    return "\n".join([
        f"App streaming path vs direct SSE, {summary['repetitions']} alternating runs each:",
        f"  tokens/s (median)    app {summary['app_tokens_per_s_median']:.1f}, direct "
        f"{summary['direct_tokens_per_s_median']:.1f}",
        f"  app/direct per pair  median {ratio:.3f} ({verdict(ratio >= MIN_TOKENS_PER_S_RATIO)} "
        f">= {MIN_TOKENS_PER_S_RATIO}), quartiles {low:.3f}-{high:.3f}",
        f"  TTFT (median)        app {summary['app_ttft_ms_median']:.1f} ms, direct "
        f"{summary['direct_ttft_ms_median']:.1f} ms",
        f"  added TTFT, p50      {added:+.2f} ms ({verdict(added <= MAX_ADDED_TTFT_MS)} <= "
        f"{MAX_ADDED_TTFT_MS:g} ms); {summary['added_ttft_ms_p50_before_batcher']:+.2f} ms "
        "before the token batcher",
    ])


def run(cfg: BenchConfig, settings: Settings, repetitions: int, out_dir: Path) -> int:
    if repetitions < 1:
        raise BenchError("--repetitions must be at least 1.")
    result = asyncio.run(measure(cfg, settings, repetitions))
    print(render(result["summary"]))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "app-overhead.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0 if result["summary"]["meets_targets"] else 1
