"""This chat's state in Chainlit's user session: the model's history (``conversation``), the
last prompt's length (``budget``), the settings and their panel (``params``), and what its
engine is (``server``, ``engine_model``)."""

from __future__ import annotations

import chainlit as cl

from app.conversation.chat_settings import ChatParams, default_params, panel
from app.conversation.history import MIN_REPLY_TOKENS, Conversation
from app.conversation.notices import lang
from app.conversation.prompt_budget import PromptBudget
from app.engine import server_info
from app.worker import ENGINES, HTTP, SETTINGS
from server.demo_stamp import is_demo_model


def start_session(conversation: Conversation) -> None:
    cl.user_session.set("conversation", conversation)
    cl.user_session.set("budget", PromptBudget())  # the last prompt's length: few /tokenize calls
    cl.user_session.set("params", default_params(SETTINGS, conversation.system_prompt))
    # The text of the chat's files by path: read once, then deleted (app/conversation/answer.py).
    cl.user_session.set("files_read", {})


def use_params(params: ChatParams) -> None:
    cl.user_session.set("params", params)
    cl.user_session.get("conversation").system_prompt = params.system_prompt


async def send_panel() -> None:
    params: ChatParams = cl.user_session.get("params")
    await panel(params, max_reply_budget(), lang(), SETTINGS.system_prompt if ENGINES.several else None).send()


def max_reply_budget() -> int:
    _, max_len = cl.user_session.get("engine_model") or ("", ENGINES.current().settings.max_model_len)
    return max(MIN_REPLY_TOKENS, max_len - MIN_REPLY_TOKENS)


async def engine_model() -> tuple[str, int]:
    """(served name, context window): the process's recent answer, asked again after a failure."""
    cached = cl.user_session.get("engine_model")
    # A resumed chat gets its session back from JSON: the tuple, but no ServerInfo (docs/notes.md).
    if cached and isinstance(cl.user_session.get("server"), server_info.ServerInfo):
        return cached
    chosen = ENGINES.current()
    server = await chosen.server.get(lambda: server_info.probe(chosen.client, HTTP, chosen.settings))
    cl.user_session.set("server", server)  # what it is, and how it counts tokens
    cl.user_session.set("engine_model", (server.model, server.window))
    cl.user_session.set("is_demo", is_demo_model(server.root))
    return server.model, server.window
