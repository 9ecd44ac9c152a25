"""app/conversation/token_batcher.py: streamed tokens go out in a few frames, none lost or reordered;
fewer frames when many replies stream, the first piece always at once."""

from __future__ import annotations

import random

import pytest

from app.conversation.token_batcher import (FLUSH_EVERY_S, FRAMES_PER_S, MAX_EVERY_S, RATE_WEIGHT, SECONDS_PER_CHAR,
                               Streaming, TokenBatcher, engine_piece_tokens, flush_interval)


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


# --- a crowd: fewer, bigger frames --------------------------------------------------

def test_the_interval_grows_with_the_replies_streaming_up_to_a_cap():
    assert flush_interval(1, 0) == FLUSH_EVERY_S          # one chat: 25 frames/s
    assert flush_interval(int(FRAMES_PER_S * 0.1), 0) == pytest.approx(0.1)
    assert flush_interval(10_000, 0) == MAX_EVERY_S       # a crowd still moves 4 times a second
    assert flush_interval(1, 5000) == pytest.approx(5000 * SECONDS_PER_CHAR)  # long text: as before


async def test_replies_inside_the_block_count_as_streaming_and_leave_it_flushed():
    streaming = Streaming()
    clock, sent, slept = FakeClock(), [], []

    async def send(chunk: str) -> None:
        sent.append(chunk)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    batchers = [TokenBatcher(send, clock=clock, streaming=streaming, sleep=sleep) for _ in range(100)]
    for b in batchers:
        await b.__aenter__()
    assert streaming.count == 100
    first = batchers[0]
    await first.add("a")                       # the first piece: at once, whatever the crowd
    clock.now += FLUSH_EVERY_S * 1.5
    await first.add("b")                       # one chat alone would send now; 100 hold back
    assert sent == ["a"]
    clock.now += 100 / FRAMES_PER_S
    await first.add("c")
    assert sent == ["a", "bc"]
    await first.add("d")
    for b in batchers:
        await b.__aexit__(None, None, None)
    assert streaming.count == 0 and sent == ["a", "bc", "d"] and first.frames == 3
    # After a frame inside the block the chat waits for the next (nothing is read meanwhile);
    # the last one, sent on leaving, does not.
    assert slept == [MAX_EVERY_S, MAX_EVERY_S, 0]


async def test_a_chat_alone_never_waits_between_reads():
    slept = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def send(chunk: str) -> None:
        pass

    async with TokenBatcher(send, sleep=sleep) as b:
        await b.add("a")
        await b.flush()
    assert slept == [0]  # after its one frame; an empty flush sends and waits for nothing


async def test_the_block_is_left_flushed_and_uncounted_when_the_stream_fails():
    b, clock, sent = batcher()
    streaming = b._streaming = Streaming()
    with pytest.raises(RuntimeError):
        async with b:
            await b.add("x")
            await b.add("y")
            raise RuntimeError("the engine died")
    assert sent == ["x", "y"] and streaming.count == 0


def test_the_engine_groups_tokens_only_when_pieces_still_come_twice_per_frame():
    streaming = Streaming()
    assert engine_piece_tokens(streaming, 16) == 1                 # no rate known yet
    streaming.finished(50.0)
    assert engine_piece_tokens(streaming, 16) == 1                 # one chat: 50 x 0.04 / 2 = 1
    streaming.count = 63                                           # 64 chats: 0.256 s frames
    assert engine_piece_tokens(streaming, 16) == int(50 * MAX_EVERY_S / 2)
    assert engine_piece_tokens(streaming, 4) == 4                  # the setting caps it
    assert engine_piece_tokens(streaming, 1) == 1                  # and 1 turns it off
    streaming.finished(None)                                       # a reply without figures
    streaming.finished(10.0)
    assert streaming.tokens_per_s == pytest.approx(50 + RATE_WEIGHT * (10 - 50))
