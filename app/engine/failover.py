"""A reply that outlives the engine serving it: sent again before its first token, continued after.

``stream_answer`` (app/conversation/answer.py) reads a reply's pieces from
:func:`resilient_reply` instead of the engine's stream. When the stream fails in a way another
try can mend (the engine refused the connection, closed it, or said it is loading:
app/engine/continuation.next_step), the reply goes on on whichever engine answers: at once on
another copy behind the balancer, or on the same engine once the supervisor has restarted it.
The wait is bounded by ERNIE_CONTINUE_WAIT_S, counted from the failure; a reply that makes
progress again starts a new count.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from typing import AsyncIterator, Awaitable, Callable, Optional, TypeVar

from openai import AsyncOpenAI

from app.engine import engine_client as ec
from app.engine.continuation import ContinuationRequest, continuation_request, next_step, retry_delay_s

# The chat says the reply waits once the tries at once and 0.5 s later failed too (1.5 s after
# the cut): another copy would have taken it by then, and the supervisor, which looks every
# 0.5 s, has said whether it is restarting the engine (server/engine_state.py).
TELL_AFTER_TRIES = 4
T = TypeVar("T")


class Outage:
    """The tries since a reply (or the steps before it) last got an answer: how long the
    engine has been away, and the pause before the next try, which tells the chat once that
    it waits (``TELL_AFTER_TRIES``)."""

    def __init__(self, wait_s: float, on_wait: Callable[[], Awaitable[None]]):
        self.wait_s, self.on_wait = wait_s, on_wait
        self.failed_at: Optional[float] = None
        self.tries = 0
        self.told = False

    def waited_s(self) -> float:
        """Seconds since the first failure of this outage (0 for the first)."""
        now = time.monotonic()
        self.failed_at = self.failed_at or now
        return now - self.failed_at

    async def pause(self) -> None:
        self.tries += 1
        if self.tries >= TELL_AFTER_TRIES and not self.told:
            self.told = True
            await self.on_wait()
        await asyncio.sleep(retry_delay_s(self.tries, self.wait_s - self.waited_s()))


async def when_engine_answers(call: Callable[[], Awaitable[T]], wait_s: float,
                              on_wait: Callable[[], Awaitable[None]],
                              may_come_back: Callable[[float], bool] = lambda waited_s: True) -> T:
    """``call()`` (the steps before a reply: what the engine is, the prompt's count), tried
    again as a reply's request is while the engine is away, for up to ``wait_s``; ``on_wait``
    once when it waits. Any other failure is raised at once, but for the engine's own errors
    (HTTP 500), which are tried again a few times first: these steps only read, and a vLLM
    whose engine core died answered /tokenize with a 500 for a moment before it went away
    (seen on the H200: 2-4 chats in 800-3,700).  An engine that is not there and, by
    ``may_come_back(seconds away)``, will not come back is said to be down at once."""
    outage = Outage(wait_s, on_wait)
    while True:
        try:
            return await call()
        except Exception as exc:
            waited_s = outage.waited_s()
            kind = ec.error_kind(exc)
            transient = kind == "engine_error" and outage.tries < TELL_AFTER_TRIES - 1
            down = (kind == "unreachable" and outage.tries >= TELL_AFTER_TRIES - 1
                    and not may_come_back(waited_s))
            if down or not transient and next_step(kind, "", 0, 1, waited_s, wait_s) != "retry":
                raise
            await outage.pause()


def merge(stats: ec.ReplyStats, part: ec.ReplyStats, produced: int, continuation: bool,
          pieces_before: int = 0) -> None:
    """The reply's figures from those of its latest part: its first token stays the first
    part's, its prompt the one the user's message made (a continuation's prompt holds the
    reply so far), its reply tokens and streamed pieces those of every part."""
    stats.pieces = pieces_before + part.pieces
    stats.first_token_at = stats.first_token_at or part.first_token_at
    if part.prompt_tokens is not None and stats.prompt_tokens is None:
        stats.prompt_tokens = part.prompt_tokens - produced if continuation else part.prompt_tokens
    if part.completion_tokens is not None:
        stats.completion_tokens = produced + part.completion_tokens
    stats.finish_reason = part.finish_reason or stats.finish_reason


async def resilient_reply(
    client: AsyncOpenAI,
    model: str,
    messages: list[dict],
    stats: ec.ReplyStats,
    *,
    temperature: float,
    top_p: float,
    max_tokens: int,
    extra_body: Optional[dict],
    can_continue: bool,
    wait_s: float,
    on_wait: Callable[[], Awaitable[None]],
    shown: str = "",
    produced: int = 0,
) -> AsyncIterator[str]:
    """Yield the reply's pieces as ``ec.stream_reply`` does, across failed engines.

    ``can_continue``: the server takes vLLM's ``continue_final_message`` and sends usage in
    every chunk (``ec.LIVE_USAGE`` in ``extra_body``), so a reply cut mid-stream can go on
    from its text; without it only a reply cut before its first token is sent again.
    ``shown`` and ``produced``: the text and tokens of a reply another process began (a
    takeover, app/conversation/in_flight.py), which this one continues from the start.
    ``on_wait`` runs once per outage, when the reply waits for an engine to come back
    (``TELL_AFTER_TRIES``). The last failure is raised when waiting cannot help any more.
    Consume inside ``contextlib.aclosing``, as ``ec.stream_reply``.
    """
    # shown, produced: the text and tokens of the parts before this one
    from_text = bool(shown)    # the request continues text shown (a continuation)
    request = (continuation_request(messages, shown, max_tokens, produced, extra_body) if from_text
               else ContinuationRequest(messages, max_tokens, extra_body or {}))
    uncounted = False          # a cut the reply has not yet gone on from
    outage = Outage(wait_s, on_wait)
    while True:
        part, pieces_before = ec.ReplyStats(), stats.pieces
        try:
            async with aclosing(ec.stream_reply(
                    client, model, request.messages, part, temperature=temperature, top_p=top_p,
                    max_tokens=request.max_tokens, extra_body=request.extra_body or None)) as pieces:
                async for piece in pieces:
                    merge(stats, part, produced, from_text, pieces_before)
                    stats.continued += uncounted
                    uncounted = False
                    if outage.failed_at is not None:  # going again: a later cut is a new outage
                        outage = Outage(wait_s, on_wait)
                    shown += piece
                    yield piece
        except Exception as exc:
            merge(stats, part, produced, from_text, pieces_before)
            produced = stats.completion_tokens or produced
            step = next_step(ec.error_kind(exc), shown, produced, max_tokens, outage.waited_s(), wait_s)
            if step == "done":
                stats.finish_reason, stats.finished_at = "length", time.perf_counter()
                return
            if step == "give_up" or (step == "continue" and not can_continue):
                raise
            await outage.pause()
            if step == "continue":
                from_text = uncounted = True
                request = continuation_request(messages, shown, max_tokens, produced, extra_body)
            continue
        merge(stats, part, produced, from_text, pieces_before)
        stats.continued += uncounted  # a continuation with nothing more to say still went on
        stats.finished_at = part.finished_at
        return
