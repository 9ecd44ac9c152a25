"""What the chat says to its user besides replies: notices, and errors, each counted by its
kind (the usage log, the admin page, the app's metrics) and worded for the model the chat
talks to."""

from __future__ import annotations

import asyncio
from typing import Optional

import chainlit as cl

from app import chat_metrics, chat_records
from app.engine import engine_client as ec
from app.texts import lang_of, text
from app.worker import ENGINES, SETTINGS


def lang() -> str:
    return lang_of(cl.context.session.language)


async def notice(content: str, kind: str = "notice", saved: bool = True, **metadata) -> None:
    """Show a notice; ``saved=False``: only on the page, never in the saved chat."""
    message = cl.Message(content=content, metadata={"kind": kind, **metadata})
    if not saved:
        message.persisted = True  # Chainlit's send then hands it to no data layer
    await message.send()


async def notices_after(delay_s: float, notices: list[tuple[str, str]]) -> None:
    """Each (content, kind) in turn, ``delay_s`` from now."""
    await asyncio.sleep(delay_s)
    for content, kind in notices:
        await notice(content, kind)


def login_name() -> Optional[str]:
    """Who chats, for the usage log; None with login off."""
    user = cl.user_session.get("user")
    return user.identifier if user is not None else None


async def show_error(content: str, kind: str, saved: bool = True) -> None:
    """``kind``: the text's key, counted per day on the admin page and in the app's metrics;
    ``saved=False``: only on the page, never in the saved chat."""
    chat_records.error(SETTINGS.usage_log, kind, login_name())
    chat_metrics.error_shown(kind)
    message = cl.ErrorMessage(content=content)
    message.metadata = {"kind": "error"}  # ErrorMessage takes no metadata argument
    if not saved:
        message.persisted = True
    await message.send()


async def say_error(exc: BaseException, mid_reply: bool = False) -> None:
    kind = ec.error_kind(exc)
    if kind == "too_long":
        kind = "server_too_long"  # only a server that cannot count lets this happen
    elif kind in ("unreachable", "cut") and mid_reply:
        kind = "interrupted"  # tokens had come, then the engine went and none came back in time
    elif kind == "unreachable" and engine_restarting():
        kind = "loading"  # the supervisor says vLLM is on its way back
    cl.user_session.set("engine_model", None)  # the engine may come back with other figures
    chosen = ENGINES.current()
    chosen.server.forget()
    await show_error(chosen.error_text(lang(), kind, exc), kind)


def engine_restarting() -> bool:
    return ENGINES.current().state().get("state") in ("starting", "restarting")


async def say_waiting() -> None:
    """A reply's engine stopped and no other took it at once: it goes on when one is back."""
    await notice(text(lang(), "engine_restarting" if engine_restarting() else "engine_waiting",
                      wait=SETTINGS.continue_wait_s))
