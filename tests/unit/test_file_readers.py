"""The attached files' readers: a bounded pool that refuses a message when full."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.conversation.file_readers import Busy, Readers


async def test_past_the_readers_and_the_waiting_a_message_is_refused_at_once():
    readers, release = Readers(at_once=1, waiting=1), threading.Event()
    reads = [asyncio.ensure_future(readers.run(release.wait)) for _ in range(2)]
    await asyncio.sleep(0)  # both taken: one reading, one waiting
    with pytest.raises(Busy):
        await readers.run(lambda: "never read")
    release.set()
    assert await asyncio.gather(*reads) == [True, True]
    assert await readers.run(lambda: "read") == "read"


async def test_a_stopped_message_keeps_its_room_until_its_read_ends():
    """Stop cancels the waiting message, not the thread: its read (and PDF child) goes on."""
    readers, release = Readers(at_once=1, waiting=0), threading.Event()
    stopped = asyncio.ensure_future(readers.run(release.wait))
    await asyncio.sleep(0)
    stopped.cancel()
    with pytest.raises(Busy):
        await readers.run(lambda: "never read")
    release.set()
    readers.pool.submit(lambda: None).result()  # past the read, and the room given back after it
    assert await readers.run(lambda: "read") == "read"
