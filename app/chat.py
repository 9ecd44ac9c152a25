"""The Chainlit chat: streams replies from the engine, fitted to its context window.

Run by the supervisor as ``chainlit run app/chat.py --headless``.  The handlers
stay thin: streaming, history fitting, texts, personas, the settings panel and
saved chats live in their own modules.

Only real exchanges enter the model's history (:class:`Conversation`).  Every
other message the chat shows (welcome, notices, errors, figures) is marked
``metadata={"kind": ...}`` so a resumed chat can tell them apart.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import aclosing
from typing import Optional

import chainlit as cl
import httpx

import app.chainlit_speed  # noqa: F401  (Chainlit without its 1 ms sleeps, before any message)
from app import engine_client as ec
from app.chat_settings import ChatParams, apply, default_params, panel
from app.history import MIN_REPLY_TOKENS, Conversation, TooLong
from app.personas import chat_profiles, persona
from app.prompt_budget import PromptBudget
from app.texts import figures_line, lang_of, text
from app.token_batcher import STREAMING, TokenBatcher, engine_piece_tokens
from server import chat_db
from server.demo_stamp import is_demo_model
from server.engine_state import read_state
from server.metrics import fetch_metrics_async
from server.settings import load_settings
from server.usage_log import append_usage

SETTINGS = load_settings()
# One client pair for every chat: building them costs ~25 ms of CPU each, which stalls
# the event loop when many chats open at once (found by `ernie-chat qa-load`).
CLIENT = ec.make_client(SETTINGS)
# httpx logs one INFO line per request (every reply, every count): a log line per message
# at a crowd's rates that says nothing the engine's log does not.
for _client_log in ("httpx", "httpx2"):
    logging.getLogger(_client_log).setLevel(logging.WARNING)
HTTP = httpx.AsyncClient(timeout=httpx.Timeout(SETTINGS.request_timeout_s, connect=5.0),
                         limits=httpx.Limits(max_connections=None, keepalive_expiry=ec.KEEPALIVE_S))
FIGURES_MARK = "\n\n*⏱ "  # starts the figures line appended to a finished reply
STATUS_COMMAND = "/status"


def lang() -> str:
    return lang_of(cl.context.session.language)


async def notice(content: str, kind: str = "notice") -> None:
    await cl.Message(content=content, metadata={"kind": kind}).send()


async def engine_model() -> tuple[str, int]:
    """(served name, max_model_len), asked once per chat and again after a failure."""
    cached = cl.user_session.get("engine_model")
    if cached:
        return cached
    name, max_len, root = await ec.served_model(CLIENT)
    cl.user_session.set("engine_model", (name, max_len or SETTINGS.max_model_len))
    cl.user_session.set("is_demo", is_demo_model(root))
    return name, max_len or SETTINGS.max_model_len


async def show_error(content: str) -> None:
    message = cl.ErrorMessage(content=content)
    message.metadata = {"kind": "error"}  # ErrorMessage takes no metadata argument
    await message.send()


async def say_error(exc: BaseException, mid_reply: bool = False) -> None:
    kind = ec.error_kind(exc)
    if kind == "unreachable" and mid_reply:
        kind = "interrupted"  # the connection broke after tokens came: the engine died
    elif kind == "unreachable" and read_state(SETTINGS).get("state") in ("starting", "restarting"):
        kind = "loading"  # the supervisor says vLLM is on its way back
    cl.user_session.set("engine_model", None)  # the engine may come back with other figures
    detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    await show_error(text(lang(), kind, url=SETTINGS.engine_base_url,
                          seconds=SETTINGS.request_timeout_s, model=SETTINGS.served_model_name,
                          detail=detail[:300]))


# --- chat set-up ---------------------------------------------------------------

@cl.set_chat_profiles
async def set_chat_profiles(user: Optional[cl.User] = None, language: Optional[str] = None):
    return chat_profiles(lang_of(language))


def start_session(conversation: Conversation) -> None:
    cl.user_session.set("conversation", conversation)
    cl.user_session.set("budget", PromptBudget())  # the last prompt's length: few /tokenize calls
    cl.user_session.set("params", default_params(SETTINGS, conversation.system_prompt))


async def send_panel() -> None:
    params: ChatParams = cl.user_session.get("params")
    await panel(params, max_reply_budget(), lang()).send()


def max_reply_budget() -> int:
    _, max_len = cl.user_session.get("engine_model") or ("", SETTINGS.max_model_len)
    return max(MIN_REPLY_TOKENS, max_len - MIN_REPLY_TOKENS)


@cl.on_chat_start
async def on_chat_start() -> None:
    chosen = persona(cl.user_session.get("chat_profile"))
    start_session(Conversation(chosen.system_prompt or SETTINGS.system_prompt))
    try:
        name, _ = await engine_model()
    except Exception as exc:  # the chat still opens; the message says what is wrong
        await send_panel()
        await say_error(exc)
        return
    await send_panel()
    welcome = text(lang(), "welcome", model=name)
    if cl.user_session.get("is_demo"):
        welcome += "\n\n" + text(lang(), "demo")
    await notice(welcome, "welcome")


@cl.on_settings_update
async def on_settings_update(values: dict) -> None:
    params = apply(values, cl.user_session.get("params"), max_reply_budget())
    cl.user_session.set("params", params)
    cl.user_session.get("conversation").system_prompt = params.system_prompt


# --- one message -----------------------------------------------------------------

def clean_text(text: str) -> str:
    """What the engine can take: lone UTF-16 surrogates (a broken paste) become U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


@cl.on_message
async def on_message(message: cl.Message) -> None:
    # Stop must reach this task whatever path started it (docs/notes.md: Chainlit does not
    # register every re-run); on_stop cancels it itself.
    cl.user_session.set("task", asyncio.current_task())
    if not message.content.strip():
        await show_error(text(lang(), "empty"))
        return
    if message.content.strip() == STATUS_COMMAND:
        await show_status()
        return
    message.content = clean_text(message.content)
    conversation: Conversation = cl.user_session.get("conversation")
    params: ChatParams = cl.user_session.get("params")
    try:
        model, max_len = await engine_model()
        fitted = await cl.user_session.get("budget").fit(
            conversation, message.content, _counter(model), model, max_len, params.max_tokens)
    except TooLong as exc:
        await show_error(text(lang(), "too_long", tokens=exc.tokens, limit=exc.limit))
        return
    except Exception as exc:
        await say_error(exc)
        return
    if fitted.dropped_turns:
        await notice(text(lang(), "dropped", limit=max_len, n=fitted.dropped_turns))
    await stream_answer(conversation, message, model, fitted.messages, fitted.max_tokens, params)


async def stream_answer(conversation: Conversation, message: cl.Message, model: str,
                        messages: list[dict], max_tokens: int, params: ChatParams) -> None:
    reply = cl.Message(content="", metadata={"kind": "reply"})
    batcher = TokenBatcher(reply.stream_token)
    stats = ec.ReplyStats()
    extra_body = {"ignore_eos": True} if SETTINGS.ignore_eos else {}
    if (group := engine_piece_tokens(STREAMING, SETTINGS.stream_interval_max)) > 1:
        extra_body["stream_interval"] = group  # vLLM's tokens per piece in a crowd (token_batcher)
    pieces = ec.stream_reply(
        CLIENT, model, messages, stats,
        temperature=params.temperature, top_p=params.top_p, max_tokens=max_tokens,
        extra_body=extra_body or None,
    )
    try:
        # Leaving the batcher sends what it holds, however the stream ends; leaving
        # aclosing first closes the HTTP stream at once on Stop (engine_client).
        async with batcher, aclosing(pieces):
            async for piece in pieces:
                await batcher.add(piece)
    except asyncio.CancelledError:
        # Stop: keep what was shown, as a real turn; the notice is not history.
        conversation.add(message.content, batcher.text)
        if batcher.text:
            await reply.send()
        await notice(text(lang(), "stopped"))
        raise
    except Exception as exc:
        if batcher.text:
            await reply.send()
        await say_error(exc, mid_reply=stats.first_token_at is not None)
        return
    conversation.add(message.content, batcher.text)
    cl.user_session.get("budget").sent(stats.prompt_tokens)
    STREAMING.finished(stats.tokens_per_s)
    if stats.prompt_tokens is not None and stats.completion_tokens is not None:
        append_usage(SETTINGS.usage_log, stats.prompt_tokens, stats.completion_tokens,
                     stats.ttft_s, stats.tokens_per_s, stats.finish_reason)
    reply.content = batcher.text + FIGURES_MARK + figures_line(lang(), stats) + "*"
    await reply.send()


def _counter(model: str):
    async def count(messages: list[dict]) -> int:
        return await ec.count_tokens(HTTP, SETTINGS.engine_base_url,
                                     model, messages, SETTINGS.api_key_value)
    return count


async def show_status() -> None:
    try:
        metrics = await fetch_metrics_async(HTTP, SETTINGS.engine_base_url)
    except Exception as exc:
        await say_error(exc)
        return
    await notice(f"**{SETTINGS.engine_base_url}** — {metrics.summary()}", "status")


@cl.on_stop
async def on_stop() -> None:
    task: Optional[asyncio.Task] = cl.user_session.get("task")
    if task is not None and not task.done():
        task.cancel()


@cl.on_chat_end
async def on_chat_end() -> None:
    # Chainlit keeps every message of a chat in chat_context and never frees it (docs/notes.md).
    cl.chat_context.clear()


# --- saved chats and login (ERNIE_CHAT_DB) ----------------------------------------

def conversation_from_thread(thread: dict, system_prompt: str) -> Conversation:
    """Rebuild the model's history from saved steps: user messages and replies only."""
    conversation = Conversation(system_prompt)
    pending: Optional[dict] = None  # the user step waiting for its reply
    for step in sorted(thread.get("steps") or [], key=lambda s: s.get("createdAt") or ""):
        metadata = step.get("metadata") or {}
        if isinstance(metadata, str):
            metadata = json.loads(metadata or "{}")
        if step.get("type") == "user_message":
            pending = step
        elif step.get("type") == "assistant_message" and metadata.get("kind") == "reply" and pending:
            reply = (step.get("output") or "").split(FIGURES_MARK)[0]
            conversation.add(pending.get("output") or "", reply)
            pending = None
    return conversation


if SETTINGS.chat_db is not None:
    from chainlit.data.sql_alchemy import SQLAlchemyDataLayer

    chat_db.prepare_db(SETTINGS.chat_db)

    @cl.data_layer
    def data_layer():
        return SQLAlchemyDataLayer(conninfo=chat_db.data_layer_url(SETTINGS.chat_db))

    @cl.password_auth_callback
    def password_auth(username: str, password: str) -> Optional[cl.User]:
        name = chat_db.check_password(SETTINGS.user_passwords, username, password)
        return cl.User(identifier=name, metadata={"provider": "password"}) if name else None

    @cl.on_chat_resume
    async def on_chat_resume(thread: dict) -> None:
        chosen = persona((thread.get("metadata") or {}).get("chat_profile")
                         if isinstance(thread.get("metadata"), dict) else None)
        start_session(conversation_from_thread(thread, chosen.system_prompt or SETTINGS.system_prompt))
        await send_panel()
