"""The app's own recent figures for the live page (app/pages/live_page.py): replies streaming
now, the last replies, and each engine's rate; the drain counts the replies still streaming.

One ``RecentReplies`` per app process (``RECENT``).  The chat wraps each reply's stream
in ``RECENT.track``, naming the reply's model; the live page reads ``snapshot``.  Rates
(tokens/s) are worked out here from counters read at two moments, so any number of
open live pages see the same figure.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import AsyncIterator, Optional, Sequence

from app.engine.engine_client import ReplyStats
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
    model: str = ""  # the served name of the model that replied


@dataclass(frozen=True)
class Reading:
    """One served model's engine as the live view read it: its /metrics (None: it has none, or
    it did not answer) and whether it answered."""
    name: str
    metrics: Optional[EngineMetrics]
    engine_up: bool = True


@dataclass
class Tally:
    """One model's replies in this app."""
    streaming: int = 0  # replies streaming now
    pieces: int = 0     # text pieces streamed since start (one per token from vLLM)
    recorded: int = 0   # replies recorded since start


def total(values: Sequence[Optional[float]]) -> Optional[float]:
    """The sum of the figures known; None when none is."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


@dataclass
class RecentReplies:
    replies: deque = field(default_factory=lambda: deque(maxlen=RECENT_REPLIES))
    tallies: defaultdict = field(default_factory=lambda: defaultdict(Tally))  # model -> Tally
    _readings: dict = field(default_factory=dict)  # source -> (time, counter, rate)

    @property
    def streaming(self) -> int:
        return sum(t.streaming for t in self.tallies.values())

    @property
    def pieces(self) -> int:
        return sum(t.pieces for t in self.tallies.values())

    @property
    def recorded(self) -> int:
        return sum(t.recorded for t in self.tallies.values())

    async def track(self, pieces: AsyncIterator[str], stats: ReplyStats, model: str = "") -> AsyncIterator[str]:
        """Pass a reply of ``model`` through, counting the server's pieces (``stats.pieces``);
        record it when it ends."""
        tally = self.tallies[model]
        tally.streaming += 1
        counted = stats.pieces
        try:
            async with aclosing(pieces):  # closed at once when the chat stops reading
                async for piece in pieces:
                    # A piece holds what one read of the stream brought: count the server's
                    # pieces in it (stats.pieces), tokens at vLLM's default interval.
                    tally.pieces += stats.pieces - counted
                    counted = stats.pieces
                    yield piece
        finally:
            tally.streaming -= 1
            if stats.ttft_s is not None:  # a stopped or broken reply had its first token too
                tally.recorded += 1
                self.replies.append(Reply(time.monotonic(), stats.ttft_s * 1000, stats.tokens_per_s,
                                          stats.completion_tokens, model))

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

    def model_figures(self, now: float, reading: Reading) -> dict:
        """One model's figures: its engine's where it has /metrics, else the app's own."""
        metrics = reading.metrics
        if metrics is not None:  # keyed per engine: each engine has its own counter
            tokens_per_s = self.rate(f"engine {reading.name}", metrics.generation_tokens, now)
        else:
            tokens_per_s = self.rate(f"chat {reading.name}", self.tallies[reading.name].pieces, now)
        return {
            "name": reading.name,
            "engine_up": reading.engine_up,
            "metrics": metrics is not None,
            "tokens_per_s": tokens_per_s,
            "running": metrics.running if metrics else None,
            "waiting": metrics.waiting if metrics else None,
            "kv_cache_pct": metrics.kv_cache_usage * 100 if metrics else None,
        }

    def snapshot(self, now: float, readings: Sequence[Reading], chats: int, only: bool = False) -> dict:
        """The live view's figures at ``now`` (time.monotonic()): each model's in ``models``, and
        their totals at the top.  ``only``: the one model read is the only one shown, its replies
        alone (``/live?model=``); else the app's replies of every model count."""
        models = [self.model_figures(now, reading) for reading in readings]
        tallies = [self.tallies[r.name] for r in readings] if only else list(self.tallies.values())
        replies = [r for r in self.replies if not only or r.model == readings[0].name]
        kv = [m["kv_cache_pct"] for m in models if m["kv_cache_pct"] is not None]
        return {
            "metrics": any(m["metrics"] for m in models),
            "tokens_per_s": sum(m["tokens_per_s"] for m in models),
            "running": total([m["running"] for m in models]),
            "waiting": total([m["waiting"] for m in models]),
            # KV pools are per engine, so a sum would hide a full one: the fullest model's is
            # the one that queues requests first.
            "kv_cache_pct": max(kv) if kv else None,
            "streaming": sum(t.streaming for t in tallies),
            "chats": chats,
            "replies_total": sum(t.recorded for t in tallies),
            "replies": [{**asdict(r), "ago_s": now - r.finished} for r in replies],
            "models": models,
        }


RECENT = RecentReplies()
