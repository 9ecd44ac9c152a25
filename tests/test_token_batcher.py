"""app/token_batcher.py: streamed tokens go out in a few frames, none lost or reordered."""

from __future__ import annotations

import random

from app.token_batcher import TokenBatcher


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def batcher(every_s: float = 4.0):
    """A batcher on a fake clock; returns (batcher, clock, list of sent chunks)."""
    clock, sent = FakeClock(), []

    async def send(chunk: str) -> None:
        sent.append(chunk)

    return TokenBatcher(send, every_s=every_s, clock=clock), clock, sent


async def test_first_token_goes_out_at_once_then_tokens_are_held_back():
    # Batching must not add to the time to first token.
    b, clock, sent = batcher()
    for token in "abcdefghij":
        await b.add(token)
    assert sent == ["a"]
    assert b.text == "a"


async def test_first_token_after_the_interval_sends_the_whole_group():
    b, clock, sent = batcher()
    await b.add("x")
    for token in "abc":
        await b.add(token)
    clock.now += 4.0
    await b.add("d")
    assert sent == ["x", "abcd"]


async def test_one_frame_per_interval_at_a_steady_rate():
    b, clock, sent = batcher(every_s=4.0)
    for i in range(1, 13):
        clock.now += 1.0
        await b.add(str(i % 10))
    # The first token at once, then one frame per 4 s interval.
    assert sent == ["1", "2345", "6789"]


async def test_flush_sends_the_rest():
    b, clock, sent = batcher()
    await b.add("Hel")
    await b.add("lo")
    await b.add("!")
    await b.flush()
    assert sent == ["Hel", "lo!"]
    assert b.text == "Hello!"


async def test_flush_with_nothing_pending_sends_no_empty_frame():
    b, clock, sent = batcher()
    await b.flush()
    await b.add("x")
    await b.flush()
    await b.flush()
    assert sent == ["x"]


async def test_flush_restarts_the_interval():
    b, clock, sent = batcher(every_s=4.0)
    clock.now += 3.0
    await b.add("a")
    await b.flush()
    clock.now += 3.0  # 6 s since creation, but only 3 s since the flush
    await b.add("b")
    assert sent == ["a"]


async def test_random_stream_arrives_whole_in_order_and_in_few_frames():
    rng = random.Random(7)
    b, clock, sent = batcher(every_s=0.04)
    tokens = [rng.choice(["Hello", " wor", "ld", "，", "你好", "\n", " ", "🙂"]) + str(i)
              for i in range(2000)]
    for token in tokens:
        clock.now += rng.uniform(0.0, 0.02)
        await b.add(token)
        assert b.text == "".join(sent)  # .text is exactly what went out so far
    await b.flush()
    assert "".join(sent) == "".join(tokens)
    assert b.text == "".join(tokens)
    assert all(sent)
    assert len(sent) < len(tokens) / 2
