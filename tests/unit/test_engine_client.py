"""app/engine/engine_client: the chat's reader of the engine's event stream, and its errors."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from app.engine.engine_client import (ReplyStats, error_kind, make_client, sse_chunk, sse_chunks, sse_payloads,
                                      stream_reply)
from server.settings import Settings


def test_data_lines_are_decoded_and_everything_else_skipped():
    assert sse_chunk('data: {"choices": [{"delta": {"content": "Hi"}}]}') == {
        "choices": [{"delta": {"content": "Hi"}}]}
    assert sse_chunk('data:{"usage": {"completion_tokens": 3}}') == {"usage": {"completion_tokens": 3}}
    for line in ("", ": keep-alive comment", "event: message", "data: [DONE]", "data:"):
        assert sse_chunk(line) is None, line


def test_an_error_inside_a_200_stream_raises_like_the_sdk():
    with pytest.raises(openai.APIError, match="engine died") as info:
        sse_chunk('data: {"error": {"message": "engine died", "type": "InternalServerError"}}')
    assert info.value.body == {"message": "engine died", "type": "InternalServerError"}
    assert error_kind(info.value) == "engine_error"
    with pytest.raises(openai.APIError, match="An error occurred during streaming"):
        sse_chunk('data: {"error": "boom"}')


def test_an_engine_core_that_died_under_its_api_server_is_a_cut_reply():
    """vLLM's EngineDeadError, in a stream and as a 500 (seen on the H200 after a kill -9 of an
    engine core): the engine stopped, so the reply goes on elsewhere (app/engine/continuation.py)."""
    dead = ('data: {"error": {"message": "EngineCore encountered an issue. See stack trace (above) '
            'for the root cause.", "type": "InternalServerError", "code": 500}}')
    with pytest.raises(openai.APIError) as info:
        sse_chunk(dead)
    assert error_kind(info.value) == "cut"
    request = httpx.Request("POST", "http://engine/tokenize")
    response = httpx.Response(500, request=request, text='{"error": "EngineCore encountered an issue."}')
    assert error_kind(httpx.HTTPStatusError("Server error '500 Internal Server Error'", request=request,
                                            response=response)) == "cut"


def test_an_api_server_whose_engine_core_shut_down_cuts_the_reply():
    """vLLM's 500 for a request that came in as its engine core died (seen on the H200 with a
    copy killed under 1,000 users): the reply goes on on another copy, it is no final error."""
    body = ('{"error": {"message": "cannot schedule new futures after shutdown", '
            '"type": "InternalServerError", "param": null, "code": 500}}')
    request = httpx.Request("POST", "http://engine/v1/chat/completions")
    response = httpx.Response(500, request=request, text=body)
    assert error_kind(openai.InternalServerError(f"Error code: 500 - {body}", response=response,
                                                 body=json.loads(body)["error"])) == "cut"
    assert error_kind(httpx.HTTPStatusError("Server error '500 Internal Server Error'", request=request,
                                            response=response)) == "cut"
    other = httpx.Response(500, request=request, text='{"error": {"message": "out of memory"}}')
    assert error_kind(openai.InternalServerError("Error code: 500", response=other, body=None)) == "engine_error"


def test_a_broken_line_is_an_error_not_a_silent_gap():
    with pytest.raises(ValueError):
        sse_chunk('data: {"choices": [')


# --- a stream that breaks or stalls after some tokens ----------------------------------
# A fake upstream (a few lines of asyncio): it cuts or freezes the stream at a chosen
# point, which a real vLLM does not do on demand. test_faults covers the real kill -9.

CHUNK = b'data: {"choices": [{"delta": {"content": "word "}}]}\n\n'


async def stub_engine(after_tokens):
    """Serve 3 chunks of a chunked event stream, then call ``after_tokens(writer)``."""
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        for _ in range(3):
            writer.write(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
            await writer.drain()
        await after_tokens(writer)
    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def read_reply(server, read_timeout_s=5.0):
    port = server.sockets[0].getsockname()[1]
    settings = Settings(_env_file=None, engine_url=f"http://127.0.0.1:{port}",
                        request_timeout_s=read_timeout_s)
    pieces = []
    with pytest.raises(Exception) as info:
        async for piece in stream_reply(make_client(settings), "m", [], ReplyStats(),
                                        temperature=1.0, top_p=1.0, max_tokens=8):
            pieces.append(piece)
    return pieces, info.value


async def test_a_stream_cut_mid_reply_is_reported_as_cut_not_unreachable():
    async def cut(writer):
        writer.transport.abort()
    server = await stub_engine(cut)
    async with server:
        pieces, error = await read_reply(server)
    assert "".join(pieces) == "word " * 3   # what came before the cut is kept
    assert isinstance(error, openai.APIConnectionError) and error_kind(error) == "cut"


async def test_a_stream_that_stalls_mid_reply_times_out():
    async def stall(writer):
        await asyncio.sleep(30)
    server = await stub_engine(stall)
    async with server:
        pieces, error = await read_reply(server, read_timeout_s=0.5)
    assert "".join(pieces) == "word " * 3
    assert isinstance(error, openai.APITimeoutError) and error_kind(error) == "timeout"


async def test_an_engine_that_never_answers_times_out():
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(30)  # the request came; no status line, no bytes
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        started = asyncio.get_running_loop().time()
        pieces, error = await read_reply(server, read_timeout_s=0.5)
    assert pieces == [] and asyncio.get_running_loop().time() - started < 5
    assert isinstance(error, openai.APITimeoutError) and error_kind(error) == "timeout"


async def test_a_reader_kept_busy_by_its_chat_is_not_a_stalled_engine():
    """The idle deadline counts only waits for the engine: a chat whose socket holds its reader
    longer than the limit, while the engine's bytes wait in the buffer, gets the whole reply."""
    async def more(writer):
        for _ in range(2):
            await asyncio.sleep(0.1)
            writer.write(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    server = await stub_engine(more)
    port = server.sockets[0].getsockname()[1]
    settings = Settings(_env_file=None, engine_url=f"http://127.0.0.1:{port}", request_timeout_s=0.4)
    async with server:
        pieces = []
        async for piece in stream_reply(make_client(settings), "m", [], ReplyStats(),
                                        temperature=1.0, top_p=1.0, max_tokens=8):
            pieces.append(piece)
            await asyncio.sleep(0.9)  # the chat's frame takes longer than the limit
    assert "".join(pieces) == "word " * 5


async def test_stop_while_the_engine_is_slow_is_a_cancel_not_a_timeout():
    async def stall(writer):
        await asyncio.sleep(30)
    server = await stub_engine(stall)
    port = server.sockets[0].getsockname()[1]
    settings = Settings(_env_file=None, engine_url=f"http://127.0.0.1:{port}", request_timeout_s=0.3)

    async def read():
        async for _ in stream_reply(make_client(settings), "m", [], ReplyStats(),
                                    temperature=1.0, top_p=1.0, max_tokens=8):
            pass
    async with server:
        task = asyncio.create_task(read())
        await asyncio.sleep(0.1)
        task.cancel()  # Stop, before the deadline
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_connection_dropped_before_the_answer_is_cut_not_a_timeout():
    """The client's aiohttp transport reports any dropped connection as httpx2's ConnectTimeout:
    the chat must still say the engine closed it (it died), not that it is slow, nor that
    nothing listens there (the request reached it)."""
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.transport.abort()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        pieces, error = await read_reply(server)
    assert pieces == []
    assert isinstance(error, openai.APIConnectionError) and error_kind(error) == "cut"


async def test_a_refused_connection_is_unreachable():
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    settings = Settings(_env_file=None, engine_url=f"http://127.0.0.1:{port}")
    with pytest.raises(Exception) as info:
        await anext(stream_reply(make_client(settings), "m", [], ReplyStats(),
                                 temperature=1.0, top_p=1.0, max_tokens=8))
    assert error_kind(info.value) == "unreachable"


def test_the_balancers_bad_gateway_is_a_cut_and_its_unavailable_a_loading_engine():
    request = httpx.Request("POST", "http://engine/v1/chat/completions")
    for status, kind in ((502, "cut"), (503, "loading"), (500, "engine_error")):
        response = httpx.Response(status, request=request)
        assert error_kind(openai.APIStatusError("x", response=response, body=None)) == kind
        assert error_kind(httpx.HTTPStatusError("x", request=request, response=response)) == kind


async def test_the_request_body_carries_the_chat_as_given():
    """The chat travels as extra_body (the SDK's per-message transform is skipped): the
    JSON vLLM gets must still hold every message and field, the typed placeholder replaced."""
    bodies = []

    async def handle(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        bodies.append(json.loads(await reader.readexactly(length)))
        done = b"data: [DONE]\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(done), done))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Und?"}]
    async with server:
        settings = Settings(_env_file=None, engine_url=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        pieces = [p async for p in stream_reply(make_client(settings), "ernie", messages, ReplyStats(),
                                                temperature=0.7, top_p=0.9, max_tokens=64,
                                                extra_body={"ignore_eos": True, "seed": 5})]
    assert pieces == []
    assert bodies == [{"model": "ernie", "messages": messages, "stream": True, "temperature": 0.7,
                       "top_p": 0.9, "max_tokens": 64, "stream_options": {"include_usage": True},
                       "ignore_eos": True, "seed": 5}]


# --- the stream read a read at a time ---------------------------------------------------

def test_payloads_come_from_complete_lines_and_the_rest_waits_for_the_next_read():
    text = 'data: {"choices": [{"delta": {"content": "\u4e2d"}}]}\n\ndata: [DONE]\n\n'.encode()
    cut = text.index("\u4e2d".encode()) + 1  # inside the character's three bytes
    first, rest = sse_payloads(text[:cut])
    assert first == [] and rest == text[:cut]
    payloads, rest = sse_payloads(rest + text[cut:])
    assert rest == b"" and [c["choices"][0]["delta"]["content"] for c in sse_chunks(payloads)] == ["\u4e2d"]
    assert sse_payloads(b": keep-alive\r\ndata: {\"a\": 1}\r\n\r\nevent: x\n") == ([b'{"a": 1}'], b"")


def test_several_payloads_decode_in_order_and_a_bad_one_fails_after_those_before_it():
    good = [b'{"n": %d}' % i for i in range(3)]
    assert [c["n"] for c in sse_chunks(good)] == [0, 1, 2]
    chunks = sse_chunks(good[:2] + [b'{"choices": ['])
    assert [next(chunks)["n"], next(chunks)["n"]] == [0, 1]
    with pytest.raises(ValueError):
        next(chunks)
    errors = sse_chunks([good[0], b'{"error": {"message": "EngineCore encountered an issue"}}'])
    assert next(errors)["n"] == 0
    with pytest.raises(openai.APIError, match="EngineCore"):
        next(errors)


async def test_the_tokens_of_one_read_go_up_as_one_piece_then_an_error_in_it():
    error = b'data: {"error": {"message": "EngineCore encountered an issue"}}\n\n'

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        body = CHUNK * 3 + error  # one HTTP chunk: one read for the client
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     + b"%x\r\n%s\r\n" % (len(body), body))
        await writer.drain()
        await asyncio.sleep(30)
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        pieces, failure = await read_reply(server)
    assert pieces == ["word " * 3]  # shown before the error is raised
    assert isinstance(failure, openai.APIError) and error_kind(failure) == "cut"
