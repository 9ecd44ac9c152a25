"""Group streamed tokens into a few websocket frames per second, fewer when many chats stream.

One Chainlit frame per token makes the browser re-render thousands of times:
in a measurement (docs/notes.md, "Chainlit 2.12") batching every 30-50 ms cut 5,000 tokens from 2.45 s
to 1.03 s. 40 ms is below what a reader perceives as stutter.

The app's own CPU is spent per frame, not per token (docs/performance.md, "The app's cost per
token"): a frame costs the process 150-220 us, whatever it carries.  One chat at 40 ms
sends 25 frames/s; a crowd of 256 would send 6,400 frames/s, a whole core, for text that
arrives at a reading pace.  So the interval grows with the number of replies streaming
in this process: the process sends about ``FRAMES_PER_S`` frames per second in all,
each chat at most ``MAX_EVERY_S`` apart, so a reply still moves several times a second.
The first piece of a reply always goes out at once (batching must not add to the time
to first token), and so does the rest when the reply ends.

The engine can group tokens too: vLLM's per-request ``stream_interval`` sends N tokens
per streamed piece (the first token alone, at once), which saves the app a read and a
JSON parse per token and vLLM's API server as much (docs/performance.md, "The app's cost per
token").  ``engine_piece_tokens`` asks for pieces that still arrive at least twice per
frame interval, from the decode rate of the replies this process streamed last, so
grouping never holds back what the browser would have been sent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Optional

FLUSH_EVERY_S = 0.04
# The process's frame budget: 250 frames/s is 4-6 % of a core (150-220 us each).
FRAMES_PER_S = 250.0
# A crowd's chats still update four times a second: text moves at reading pace.
MAX_EVERY_S = 0.25
# The browser re-renders the whole message on every frame, so a frame costs more as the
# reply grows: past ~1,000 characters the interval grows with the text (0.04 s per
# 1,000 characters) to keep the page's work per second flat and Stop responsive.
SECONDS_PER_CHAR = FLUSH_EVERY_S / 1000


# How much each finished reply moves the decode-rate estimate.
RATE_WEIGHT = 0.2


class Streaming:
    """How many replies this process is streaming now, and how fast replies decode lately."""

    def __init__(self) -> None:
        self.count = 0
        self.tokens_per_s: Optional[float] = None

    def finished(self, tokens_per_s: Optional[float]) -> None:
        """A reply's decode rate (ReplyStats.tokens_per_s), into a moving average."""
        if tokens_per_s:
            old = self.tokens_per_s
            self.tokens_per_s = tokens_per_s if old is None else old + RATE_WEIGHT * (tokens_per_s - old)


STREAMING = Streaming()


def crowd_interval(streaming: int, every_s: float = FLUSH_EVERY_S) -> float:
    """Seconds between two frames of one reply, for ``streaming`` replies at once."""
    return max(every_s, min(MAX_EVERY_S, streaming / FRAMES_PER_S))


def flush_interval(streaming: int, sent_chars: int, every_s: float = FLUSH_EVERY_S) -> float:
    """The crowd's interval, longer for a long text (the browser's work per frame grows)."""
    return max(crowd_interval(streaming, every_s), sent_chars * SECONDS_PER_CHAR)


def engine_piece_tokens(streaming: Streaming, limit: int) -> int:
    """Tokens the engine may group into one streamed piece for a reply starting now (1: none)."""
    if limit <= 1 or not streaming.tokens_per_s:
        return 1
    return max(1, min(limit, int(streaming.tokens_per_s * crowd_interval(streaming.count + 1) / 2)))


class TokenBatcher:
    """Collects a reply's pieces and sends them in frames; use ``async with`` around the stream.

    Inside the block the reply counts as streaming (for every batcher's interval);
    leaving it sends what is left, whatever ends the block (the end of the reply,
    Stop's cancellation, an error).

    In a crowd, ``add`` returns after a frame only when the next frame is due: whatever
    the stream would hand over meanwhile could not be sent earlier anyway, and not reading
    lets the engine's events pile up in the socket, to be read in one go (one piece, one
    JSON call: ``engine_client.stream_reply``) instead of waking the chat's task, the HTTP
    client's read and the layers above once per token.  The end of a reply then shows at
    most that interval late; a chat alone, or in a group small enough for the shortest
    interval, never waits.  (Waiting only after frames of several pieces would wait every
    other frame: the read after a wait brings everything in one piece.)
    """

    def __init__(self, send: Callable[[str], Awaitable[None]], every_s: float = FLUSH_EVERY_S,
                 clock: Callable[[], float] = time.monotonic, streaming: Streaming = STREAMING,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, text: str = ""):
        self._send, self._every_s, self._clock, self._streaming = send, every_s, clock, streaming
        self._sleep = sleep
        self._pending: list[str] = []
        self._last_flush = clock()
        self._next_flush = self._last_flush
        self._active = False
        # Everything sent so far (a reply carried on starts with its saved text): what a
        # stopped reply keeps.
        self.text = text
        self.frames = 0

    async def __aenter__(self) -> "TokenBatcher":
        self._active = True
        self._streaming.count += 1
        return self

    async def __aexit__(self, *exc) -> None:
        if self._active:
            self._active = False
            self._streaming.count -= 1
        await self.flush()

    async def add(self, token: str) -> None:
        self._pending.append(token)
        # The first piece goes out at once: batching must not delay time to first token.
        if not self.text or self._clock() >= self._next_flush:
            await self.flush()

    async def flush(self) -> None:
        self._last_flush = self._clock()
        self._next_flush = self._last_flush + flush_interval(
            self._streaming.count, len(self.text), self._every_s)
        if self._pending:
            chunk = "".join(self._pending)
            self._pending.clear()
            self.text += chunk
            self.frames += 1
            await self._send(chunk)
            # When tokens arrive faster than we read them, the OpenAI stream hands out
            # buffered chunks without ever suspending, and the websocket writer task
            # would not run until the reply ends: the browser would get it all at once.
            # In a crowd, wait for the next frame here (see the class).
            crowd = crowd_interval(self._streaming.count, self._every_s)
            await self._sleep(crowd if self._active and crowd > self._every_s else 0)
