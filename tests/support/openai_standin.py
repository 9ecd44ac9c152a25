"""A small real HTTP server that stands in for OpenAI-compatible servers other than vLLM.

``STANDIN_KIND=plain`` (the default) serves only what hosted APIs and Ollama have in
common: ``GET /v1/models`` without ``max_model_len`` and a streaming
``POST /v1/chat/completions``; everything else is 404 (no /tokenize, no /metrics).
``STANDIN_KIND=llamacpp`` adds the endpoints of llama.cpp's server, in the shapes its
README documents (``/props`` with ``n_ctx``, ``/apply-template``, ``/tokenize``),
because llama.cpp itself does not install here (no Debian package, no wheel).

Its "tokenizer" is one token per whitespace-separated word plus 3 per message; like a
real server it refuses (400, OpenAI's wording) a prompt plus reply over its window
(``STANDIN_WINDOW``), so a test sees whether the chat's fitting kept within it.
``GET /standin/requests`` lists what it was sent (message count, prompt tokens, status).

Run: ``STANDIN_KIND=plain python -m uvicorn tests.support.openai_standin:app --port PORT``, or
``with running(kind, window) as url`` from a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import httpx

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

KIND = os.environ.get("STANDIN_KIND", "plain")
WINDOW = int(os.environ.get("STANDIN_WINDOW", "512"))
MODEL = "standin-model"
SECONDS_PER_TOKEN = float(os.environ.get("STANDIN_SECONDS_PER_TOKEN", "0.02"))
SEEN: list[dict] = []


def count(messages: list[dict]) -> int:
    return sum(3 + len(str(m.get("content") or "").split()) for m in messages)


async def models(request: Request) -> JSONResponse:
    owner = "llamacpp" if KIND == "llamacpp" else "organization-owner"
    return JSONResponse({"object": "list", "data": [
        {"id": MODEL, "object": "model", "created": 1735142223, "owned_by": owner}]})


def chunk(delta: dict, finish=None, usage=None) -> str:
    body = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": MODEL, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        body = {**body, "choices": [], "usage": usage}
    return f"data: {json.dumps(body)}\n\n"


async def chat(request: Request):
    body = await request.json()
    prompt, reply = count(body["messages"]), min(int(body.get("max_tokens") or 16), 64)
    too_long = prompt + reply > WINDOW
    SEEN.append({"messages": len(body["messages"]), "prompt_tokens": prompt,
                 "status": 400 if too_long else 200, "fields": sorted(body)})
    if too_long:
        return JSONResponse(status_code=400, content={"error": {
            "message": f"This model's maximum context length is {WINDOW} tokens. However, you "
                       f"requested {prompt + reply} tokens.", "type": "invalid_request_error"}})

    async def stream():
        yield chunk({"role": "assistant", "content": ""})
        for i in range(reply):
            await asyncio.sleep(SECONDS_PER_TOKEN)
            yield chunk({"content": f"word{i} "})
        yield chunk({}, finish="length")
        if (body.get("stream_options") or {}).get("include_usage"):
            yield chunk({}, usage={"prompt_tokens": prompt, "completion_tokens": reply,
                                   "total_tokens": prompt + reply})
        yield "data: [DONE]\n\n"
    return StreamingResponse(stream(), media_type="text/event-stream")


async def requests_seen(request: Request) -> JSONResponse:
    return JSONResponse(SEEN)


# --- llama.cpp's own endpoints ------------------------------------------------------------

async def props(request: Request) -> JSONResponse:
    return JSONResponse({"default_generation_settings": {"n_ctx": WINDOW}, "total_slots": 1})


async def apply_template(request: Request) -> JSONResponse:
    messages = (await request.json())["messages"]
    return JSONResponse({"prompt": "".join(f"<|{m['role']}|> {m['content']} <|end|> <|sep|> "
                                           for m in messages)})


async def tokenize(request: Request) -> JSONResponse:
    # A templated message is 3 markers + its words: what count() charges for it.
    body = await request.json()
    if "content" not in body:  # e.g. vLLM's form, {"messages": [...]}
        return JSONResponse(status_code=400, content={"error": {"message": "\"content\" must be provided"}})
    words = body["content"].split()
    return JSONResponse({"tokens": list(range(len(words)))})


routes = [Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"]),
          Route("/standin/requests", requests_seen)]
if KIND == "llamacpp":
    routes += [Route("/props", props), Route("/apply-template", apply_template, methods=["POST"]),
               Route("/tokenize", tokenize, methods=["POST"])]
app = Starlette(routes=routes)


def wait_until_serving(url: str, proc: subprocess.Popen, timeout_s: float,
                       why: Callable[[], str]) -> None:
    """Until GET ``url`` succeeds; fails with ``why()`` if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            httpx.get(url, timeout=1).raise_for_status()
            return
        except httpx.HTTPError:
            assert proc.poll() is None and time.monotonic() < deadline, why()
            time.sleep(0.2)


@contextmanager
def running(kind: str = "plain", window: int = 512, seconds_per_token: float = SECONDS_PER_TOKEN):
    """The stand-in in its own process on a free port; yields its URL, stops it after."""
    from server.stack.processes import free_port
    port = free_port()
    env = {**os.environ, "STANDIN_KIND": kind, "STANDIN_WINDOW": str(window),
           "STANDIN_SECONDS_PER_TOKEN": str(seconds_per_token)}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "tests.support.openai_standin:app",
                             "--port", str(port), "--log-level", "warning"],
                            cwd=Path(__file__).resolve().parents[2], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(f"{url}/v1/models", proc, 30, lambda: "the stand-in did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
