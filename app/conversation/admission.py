"""Whether a new message is answered, and what its replies may take: the engine's queue, the
user's replies at once (counted in this worker), the user's messages a minute and tokens a
day (counted in the store every worker shares, app/auth/user_limits.py).

A message that asks for a reply (a message for the model, a regeneration, ``/compare``) meets
all of them, and reserves its tokens: the prompt's estimate plus the reply's most tokens.
A command without a reply (``/status``, ``/export``, ``/share``, ``/unshare``) is counted as
a message only.  Use :func:`admitted` around everything the message does: its reply slot and
what its replies left of the reservation come back when the block ends, however it ends;
:func:`spend_tokens` settles each reply's tokens against the reservation meanwhile.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import AsyncIterator, Optional

import chainlit as cl

from app import chat_metrics
from app.auth.user_limits import Held, reservation, user_key
from app.conversation.notices import lang, login_name, notice
from app.engine import engine_client as ec
from app.texts import duration, text
from app.worker import ENGINES, LIMITS, REPLIES, SETTINGS

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ask:
    """What a message asks for: ``reply``, the engine (its queue, a reply slot); ``tokens``, the
    tokens reserved from the user's day (0: none asked, or no day's limit)."""

    reply: bool = True
    tokens: int = 0


COMMAND = Ask(reply=False)


@dataclass
class Admission:
    """One admitted message: whose, whether it holds a reply slot, and its reservation."""

    user: str
    reply: bool
    held: Held = field(default_factory=Held)


ADMITTED: ContextVar[Optional[Admission]] = ContextVar("admitted", default=None)


def current_user() -> str:
    """Whom the limits count: the login name, else the client's address (uvicorn takes it from
    X-Forwarded-For only when the connection comes from the balancer, on 127.0.0.1)."""
    scope = (cl.context.session.environ or {}).get("asgi.scope") or {}
    return user_key(login_name(), (scope.get("client") or ("unknown",))[0])


def reply_ask(prompt_tokens: int, replies: int = 1) -> Ask:
    """A reply (``replies`` of them: /compare) to a prompt of about ``prompt_tokens``, with this
    chat's longest reply: what it reserves of the user's day."""
    if LIMITS is None:
        return Ask()
    _, window = cl.user_session.get("engine_model") or ("", ENGINES.current().settings.max_model_len)
    reply_tokens = cl.user_session.get("params").max_tokens
    return Ask(tokens=reservation(prompt_tokens, reply_tokens, window, LIMITS.limits.tokens, replies))


def message_ask(user_text: str) -> Ask:
    """A message for the model (or one asked again): its prompt as this chat would send it."""
    if LIMITS is None or LIMITS.limits.tokens is None:
        return Ask()
    return reply_ask(cl.user_session.get("budget").estimate(cl.user_session.get("conversation"), user_text))


@asynccontextmanager
async def admitted(ask: Ask) -> AsyncIterator[bool]:
    """Whether the message is answered (the block runs either way: it returns on False).  Not
    when the engine's queue is past its bound and ERNIE_BUSY_ACTION is refuse, nor at the
    user's replies at once, nor over a limit: then it counts nowhere and the user is told."""
    admission, busy = await _admit(ask)
    if admission is None:
        yield False
        return
    token = ADMITTED.set(admission)
    try:
        if busy:
            await notice(text(lang(), "busy_wait", ahead=busy.ahead, when=duration(lang(), busy.wait_s)), "busy")
        yield True
    finally:
        ADMITTED.reset(token)
        await _release(admission)


async def _admit(ask: Ask):
    """(the admission, the queue's reading when it is long) or (None, None) once refused."""
    busy = None
    if ask.reply:
        gauge = ENGINES.current().busy
        busy = await gauge.busy() if gauge is not None else None
        if busy and SETTINGS.busy_action == "refuse":
            await limit_hit("busy", text(lang(), "busy_refused", ahead=busy.ahead,
                                         when=duration(lang(), busy.wait_s)))
            return None, None
    user = current_user()
    if ask.reply and not REPLIES.take(user):
        await limit_hit("replies", text(lang(), "limit_replies", amount=REPLIES.cap))
        return None, None
    try:
        over = await LIMITS.admit(user, ask.tokens) if LIMITS is not None else None
    except BaseException:
        if ask.reply:
            REPLIES.give(user)
        raise
    if over is not None:
        if ask.reply:
            REPLIES.give(user)
        await limit_hit(over.limit, text(lang(), f"limit_{over.limit}", amount=f"{over.amount:,}",
                                         when=duration(lang(), over.retry_after_s)))
        return None, None
    return Admission(user, ask.reply, Held(ask.tokens if LIMITS is not None else 0)), busy


async def _release(admission: Admission) -> None:
    if admission.reply:
        REPLIES.give(admission.user)  # first, before any wait: a slot is never kept
    left = admission.held.release()
    if left and LIMITS is not None:
        try:
            await LIMITS.spend_tokens(admission.user, -left)
        except Exception as exc:  # the reservation then comes back with the day
            LOG.warning("giving back %d reserved tokens failed: %s", left, exc)


async def limit_hit(limit: str, content: str) -> None:
    """Every refusal by a limit (``messages``, ``tokens``, ``replies``) or by a full queue
    (``busy``) passes here, and only those: the place to count them.  The notice is not saved:
    neither is the message it refuses (app/kept/admitted_steps.py)."""
    LOG.info("refused a message: %s", limit)
    chat_metrics.limit_hit(limit)
    await notice(content, "limited" if limit != "busy" else "busy_refused", saved=False)


async def spend_tokens(stats: ec.ReplyStats) -> None:
    """A reply's tokens, as its figures line counts them (prompt plus reply), on its user's day:
    from its message's reservation as far as it goes, the rest taken now."""
    if LIMITS is None or stats.prompt_tokens is None:
        return
    spent = stats.prompt_tokens + (stats.completion_tokens or 0)
    admission = ADMITTED.get()
    more = admission.held.cover(spent) if admission is not None else spent
    if more:
        await LIMITS.spend_tokens(admission.user if admission is not None else current_user(), more)
