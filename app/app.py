"""The Chainlit chat: streams replies from the engine, fitted to its context window.

Run by the supervisor as ``chainlit run app/app.py --headless``.  The handlers
stay thin: the streaming, history fitting and texts live in their own modules.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Optional

import chainlit as cl
import httpx

from app import engine_client as ec
from app.history import Conversation, TooLong, fit
from app.texts import figures_line, lang_of, text
from app.token_batcher import TokenBatcher
from server.settings import load_settings
from server.usage_log import append_usage

SETTINGS = load_settings()
DEMO_BUILDER = "ernie-chat demo model"


def is_demo_model(root: str) -> bool:
    """The engine serves our demo model when its folder carries our build stamp."""
    info = Path(root) / "build_info.json" if root else None
    try:
        return bool(info and info.exists() and json.loads(info.read_text()).get("builder") == DEMO_BUILDER)
    except (OSError, ValueError):
        return False


def lang() -> str:
    return lang_of(cl.context.session.language)


async def engine_model() -> tuple[str, int]:
    """(served name, max_model_len), asked once per chat and again after a failure."""
    cached = cl.user_session.get("engine_model")
    if cached:
        return cached
    name, max_len, root = await ec.served_model(cl.user_session.get("client"))
    cl.user_session.set("engine_model", (name, max_len or SETTINGS.max_model_len))
    cl.user_session.set("is_demo", is_demo_model(root))
    return name, max_len or SETTINGS.max_model_len


async def say_error(exc: BaseException) -> None:
    kind = ec.error_kind(exc)
    cl.user_session.set("engine_model", None)  # the engine may come back with other figures
    detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    await cl.ErrorMessage(content=text(
        lang(), kind, url=SETTINGS.engine_base_url, seconds=SETTINGS.request_timeout_s,
        model=SETTINGS.served_model_name, detail=detail[:300],
    )).send()


@cl.on_chat_start
async def on_chat_start() -> None:
    cl.user_session.set("client", ec.make_client(SETTINGS))
    cl.user_session.set("http", httpx.AsyncClient(timeout=httpx.Timeout(10.0)))
    cl.user_session.set("conversation", Conversation(SETTINGS.system_prompt))
    try:
        name, _ = await engine_model()
    except Exception as exc:  # the chat still opens; the message says what is wrong
        await say_error(exc)
        return
    welcome = text(lang(), "welcome", model=name)
    if cl.user_session.get("is_demo"):
        welcome += "\n\n" + text(lang(), "demo")
    await cl.Message(content=welcome).send()


@cl.on_message
async def on_message(message: cl.Message) -> None:
    # Chainlit does not register the task of an edited message's re-run, so Stop
    # would not reach it; on_stop cancels this task itself (FACTS.md).
    cl.user_session.set("task", asyncio.current_task())
    if not message.content.strip():
        await cl.Message(content=text(lang(), "empty")).send()
        return
    conversation: Conversation = cl.user_session.get("conversation")
    try:
        model, max_len = await engine_model()
        fitted = await fit(conversation, message.content, _counter(model), max_len,
                           SETTINGS.max_tokens)
    except TooLong as exc:
        await cl.ErrorMessage(content=text(lang(), "too_long", tokens=exc.tokens, limit=exc.limit)).send()
        return
    except Exception as exc:
        await say_error(exc)
        return
    if fitted.dropped_turns:
        await cl.Message(content=text(lang(), "dropped", limit=max_len, n=fitted.dropped_turns)).send()
    await stream_answer(conversation, message.content, model, fitted.messages, fitted.max_tokens)


async def stream_answer(conversation: Conversation, user_text: str, model: str,
                        messages: list[dict], max_tokens: int) -> None:
    reply = cl.Message(content="")
    batcher = TokenBatcher(reply.stream_token)
    stats = ec.ReplyStats()
    try:
        async for piece in ec.stream_reply(
            cl.user_session.get("client"), model, messages, stats,
            temperature=SETTINGS.temperature, top_p=SETTINGS.top_p, max_tokens=max_tokens,
        ):
            await batcher.add(piece)
        await batcher.flush()
    except asyncio.CancelledError:
        # Stop: keep what was shown, as a real turn, and nothing else.
        await batcher.flush()
        conversation.add(user_text, batcher.text)
        if batcher.text:
            await reply.send()
        raise
    except Exception as exc:
        await batcher.flush()
        if batcher.text:
            await reply.send()
        await say_error(exc)
        return
    conversation.add(user_text, batcher.text)
    if stats.prompt_tokens is not None and stats.completion_tokens is not None:
        append_usage(SETTINGS.usage_log, stats.prompt_tokens, stats.completion_tokens,
                     stats.ttft_s, stats.tokens_per_s, stats.finish_reason)
    reply.content = batcher.text + f"\n\n*⏱ {figures_line(lang(), stats)}*"
    await reply.send()


def _counter(model: str):
    async def count(messages: list[dict]) -> int:
        return await ec.count_tokens(cl.user_session.get("http"), SETTINGS.engine_base_url,
                                     model, messages, SETTINGS.api_key_value)
    return count


@cl.on_stop
async def on_stop() -> None:
    task: Optional[asyncio.Task] = cl.user_session.get("task")
    if task is not None and not task.done():
        task.cancel()


@cl.on_chat_end
async def on_chat_end() -> None:
    http: Optional[httpx.AsyncClient] = cl.user_session.get("http")
    if http is not None:
        await http.aclose()
    client = cl.user_session.get("client")
    if client is not None:
        await client.close()
