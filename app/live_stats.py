"""The app's own recent figures for the live view: replies streaming now, the last replies.

One ``LiveStats`` per app process (``LIVE``).  The chat wraps each reply's stream
in ``LIVE.track``; the live view reads ``snapshot``.  Rates (tokens/s) are worked
out here from counters read at two moments, so any number of open live views
see the same figure.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import AsyncIterator, Optional

from app.engine_client import ReplyStats
from server.metrics import EngineMetrics

RECENT_REPLIES = 30
# Readings closer together than this reuse the last rate: two live views polling
# 50 ms apart would otherwise see the rate of 50 ms of tokens.
MIN_RATE_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Reply:
    finished: float  # time.monotonic()
    ttft_ms: float
    tokens_per_s: Optional[float]  # None for a reply cut short (Stop, an error)
    tokens: Optional[int]


@dataclass
class LiveStats:
    replies: deque = field(default_factory=lambda: deque(maxlen=RECENT_REPLIES))
    streaming: int = 0  # replies this app is streaming now
    pieces: int = 0     # text pieces streamed since start (one per token from vLLM)
    recorded: int = 0   # replies recorded since start
    _readings: dict = field(default_factory=dict)  # source -> (time, counter, rate)

    async def track(self, pieces: AsyncIterator[str], stats: ReplyStats) -> AsyncIterator[str]:
        """Pass a reply's pieces through, counting them; record the reply when it ends."""
        self.streaming += 1
        try:
            async with aclosing(pieces):  # closed at once when the chat stops reading
                async for piece in pieces:
                    self.pieces += 1
                    yield piece
        finally:
            self.streaming -= 1
            if stats.ttft_s is not None:  # a stopped or broken reply had its first token too
                self.recorded += 1
                self.replies.append(Reply(time.monotonic(), stats.ttft_s * 1000, stats.tokens_per_s,
                                          stats.completion_tokens))

    def rate(self, source: str, counter: float, now: float) -> float:
        """Per-second growth of ``counter`` since its previous reading."""
        last = self._readings.get(source)
        if last is None or counter < last[1]:  # first reading, or the server restarted
            self._readings[source] = (now, counter, 0.0)
            return 0.0
        then, before, rate = last
        if now - then >= MIN_RATE_INTERVAL_S:
            rate = (counter - before) / (now - then)
            self._readings[source] = (now, counter, rate)
        return rate

    def snapshot(self, now: float, metrics: Optional[EngineMetrics], chats: int) -> dict:
        """The live view's figures at ``now`` (time.monotonic()): the engine's where it has
        /metrics, else the app's own."""
        if metrics is not None:
            tokens_per_s = self.rate("engine", metrics.generation_tokens, now)
        else:
            tokens_per_s = self.rate("chat", self.pieces, now)
        return {
            "metrics": metrics is not None,
            "tokens_per_s": tokens_per_s,
            "running": metrics.running if metrics else None,
            "waiting": metrics.waiting if metrics else None,
            "kv_cache_pct": metrics.kv_cache_usage * 100 if metrics else None,
            "streaming": self.streaming,
            "chats": chats,
            "replies_total": self.recorded,
            "replies": [{**asdict(r), "ago_s": now - r.finished} for r in self.replies],
        }


LIVE = LiveStats()
