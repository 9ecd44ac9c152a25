"""Whether a new message is answered: the user's limits (messages a minute, tokens a day,
counted in the store every worker shares) and the engine's queue; and what a reply spends."""

from __future__ import annotations

import logging

import chainlit as cl

from app import chat_metrics
from app.auth.user_limits import user_key
from app.conversation.notices import lang, login_name, notice
from app.engine import engine_client as ec
from app.texts import duration, text
from app.worker import ENGINES, LIMITS, SETTINGS


def current_user() -> str:
    """Whom the limits count: the login name, else the client's address (uvicorn takes it from
    X-Forwarded-For only when the connection comes from the balancer, on 127.0.0.1)."""
    scope = (cl.context.session.environ or {}).get("asgi.scope") or {}
    return user_key(login_name(), (scope.get("client") or ("unknown",))[0])


async def admitted() -> bool:
    """Whether a new message is answered: not when the engine's queue is past its bound and
    ERNIE_BUSY_ACTION is refuse, nor when its user is over a limit (then it counts nowhere)."""
    gauge = ENGINES.current().busy
    busy = await gauge.busy() if gauge is not None else None
    when = duration(lang(), busy.wait_s) if busy else ""
    if busy and SETTINGS.busy_action == "refuse":
        await limit_hit("busy", text(lang(), "busy_refused", ahead=busy.ahead, when=when))
        return False
    if LIMITS is not None and (over := await LIMITS.admit(current_user())) is not None:
        await limit_hit(over.limit, text(lang(), f"limit_{over.limit}", amount=f"{over.amount:,}",
                                         when=duration(lang(), over.retry_after_s)))
        return False
    if busy:
        await notice(text(lang(), "busy_wait", ahead=busy.ahead, when=when), "busy")
    return True


async def limit_hit(limit: str, content: str) -> None:
    """Every refusal by a limit (``messages``, ``tokens``) or by a full queue (``busy``) passes
    here, and only those: the place to count them."""
    logging.getLogger(__name__).info("refused a message: %s", limit)
    chat_metrics.limit_hit(limit)
    await notice(content, "limited" if limit != "busy" else "busy_refused")


async def spend_tokens(stats: ec.ReplyStats) -> None:
    """A reply's tokens, as its figures line counts them (prompt plus reply), on its user's day."""
    if LIMITS is not None and stats.prompt_tokens is not None:
        await LIMITS.spend_tokens(current_user(), stats.prompt_tokens + (stats.completion_tokens or 0))
