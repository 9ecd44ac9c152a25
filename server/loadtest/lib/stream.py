"""The load's hot path: one streamed completion on a plain asyncio connection, timed."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import aclosing
from typing import AsyncIterator, Optional
from urllib.parse import urlsplit

from server.loadtest.lib.config import Prompt
from server.loadtest.lib.stats import RequestRecord
from server.loadtest.lib.target import error_message
from server.settings import auth_headers

READ_LIMIT = 1 << 20  # longest line or read: one event of a long reply fits


class StreamError(RuntimeError):
    """A request that failed on the wire; recorded as the request's error, never raised out."""


class StreamConnection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the event stream back.

    The load's hot path runs on asyncio streams rather than httpx: per streamed chunk
    httpx costs about 145 us of CPU, this about 33 us and vLLM's aiohttp client 48 us
    (measured here against a stub server streaming 64 chunks 1 ms apart).
    A busy client takes CPU from the server it measures, on a small CPU machine from
    the very core vLLM's API server runs on (benchmarks/cpu-vs-vllm-bench.md), and at a
    GPU's thousands of chunks per second httpx alone would fill a core.  Every worker of
    the load owns one connection, so no request waits for one.
    """

    def __init__(self, base_url: str, api_key: Optional[str], idle_timeout_s: float):
        url = urlsplit(base_url)
        self.address = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
        self.tls = url.scheme == "https"
        self.prefix = url.path.rstrip("/")  # a server mounted below a path
        head = {"Host": url.netloc, "Content-Type": "application/json",
                "Accept": "text/event-stream", **auth_headers(api_key)}
        self.head = "".join(f"{k}: {v}\r\n" for k, v in head.items())
        self.idle_timeout_s = idle_timeout_s
        self.reader: Optional[asyncio.StreamReader] = None
        self.writer: Optional[asyncio.StreamWriter] = None
        self.last_read = 0.0
        self.timed_out = False
        self.watchdog: Optional[asyncio.TimerHandle] = None

    def close(self) -> None:
        """Drop the connection; for a request in flight vLLM then aborts it."""
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def events(self, path: str, body: dict) -> AsyncIterator[dict]:
        """The JSON chunks of the event stream that POST ``path`` answers, to its end.

        Raises StreamError for an HTTP error, for an error sent inside a 200 stream
        (vLLM does that: docs/notes.md, "vLLM's HTTP side") and when no byte arrives for ``idle_timeout_s``.
        Use it under ``aclosing``: leaving early closes the connection.
        """
        payload = json.dumps(body).encode()
        request = (f"POST {self.prefix}{path} HTTP/1.1\r\n{self.head}"
                   f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
        loop = asyncio.get_running_loop()
        self.timed_out, self.last_read = False, loop.time()
        self.watchdog = loop.call_later(self.idle_timeout_s, self._watch, loop)
        finished = False
        try:
            status, headers = await self._request(request)
            if status != 200:
                text = error_message(b"".join([piece async for piece in self._body(headers)]))
                finished = True
                raise StreamError(f"HTTP {status}: {text}")
            pending = b""
            async for piece in self._body(headers):
                *lines, pending = (pending + piece).split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:") or (data := line[5:].strip()) == b"[DONE]":
                        continue
                    chunk = json.loads(data)
                    if "error" in chunk:
                        raise StreamError(f"error in stream: {error_message(data)}")
                    yield chunk
            finished = headers.get("connection", "").lower() != "close"
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            if self.timed_out:
                raise StreamError(f"no data for {self.idle_timeout_s:g} s") from None
            raise StreamError(f"connection lost ({type(exc).__name__})") from None
        finally:
            self.watchdog.cancel()
            if not finished:  # an unread rest makes the connection useless
                self.close()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """One timer per idle period instead of one per read: cheap on the hot path."""
        idle = loop.time() - self.last_read
        if idle < self.idle_timeout_s:
            self.watchdog = loop.call_later(self.idle_timeout_s - idle, self._watch, loop)
        elif self.writer is not None:
            self.timed_out = True
            self.writer.transport.abort()

    async def _read(self, read) -> bytes:
        data = await read
        self.last_read = asyncio.get_running_loop().time()
        return data

    async def _line(self) -> bytes:
        """One line of the answer's head or chunk framing; the end of the stream here is
        a connection lost (or aborted by the watchdog)."""
        line = await self._read(self.reader.readline())
        if not line:
            raise ConnectionResetError
        return line

    async def _request(self, request: bytes) -> tuple[int, dict]:
        """Send ``request``; return the status and headers of the answer.

        A kept-alive connection that the server closed meanwhile (uvicorn does after
        a few idle seconds) fails at once; it is replaced and the request sent again.
        """
        for reused in (self.writer is not None, False):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(
                    *self.address, ssl=self.tls or None, limit=READ_LIMIT)
            self.writer.write(request)
            try:
                status = await self._read(self.reader.readline())
            except ConnectionError:
                status = b""
            if status:
                break
            self.close()
            if not reused:
                raise ConnectionResetError
        headers = {}
        while (line := await self._line()) not in (b"\r\n", b"\n"):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(status.split()[1]), headers

    async def _body(self, headers: dict) -> AsyncIterator[bytes]:
        """The body as it arrives: chunked (how servers stream), sized, or up to the close."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while size := int((await self._line()).split(b";")[0], 16):
                yield (await self._read(self.reader.readexactly(size + 2)))[:-2]
            while await self._line() not in (b"\r\n", b"\n"):
                pass  # trailer fields
        elif "content-length" in headers:
            yield await self._read(self.reader.readexactly(int(headers["content-length"])))
        else:
            headers["connection"] = "close"
            while piece := await self._read(self.reader.read(READ_LIMIT)):
                yield piece


def completion_body(model: str, prompt: Prompt, ignore_eos: bool, sampling: dict) -> dict:
    """One streamed completion; ``sampling`` (BenchConfig.sampling) holds only what was asked."""
    body = {"model": model, "prompt": prompt.text, "max_tokens": prompt.max_tokens,
            "stream": True, "stream_options": {"include_usage": True}, **sampling}
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM's sampling field: every reply is max_tokens long
    return body


async def send(conn: StreamConnection, body: dict, record: RequestRecord) -> RequestRecord:
    """Send one streamed completion and fill ``record`` with its timings."""
    chunks, usage_tokens = 0, None
    started = time.perf_counter()
    last = started
    try:
        stream = conn.events("/v1/completions", body)
        async with aclosing(stream):
            async for chunk in stream:
                now = time.perf_counter()
                if choices := chunk.get("choices"):
                    if record.ttft_s is None:
                        record.ttft_s = now - started
                    else:
                        record.itl_s.append(now - last)
                    last, chunks = now, chunks + 1
                    record.finish_reason = choices[0].get("finish_reason") or record.finish_reason
                if usage := chunk.get("usage"):
                    usage_tokens = usage.get("completion_tokens")
                    record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
    except (StreamError, ValueError) as exc:
        record.error = str(exc) or type(exc).__name__
        return record
    if record.ttft_s is None:
        record.error = "the stream ended without a token"
        return record
    record.e2e_s = last - started
    record.output_tokens, record.output_tokens_from = (
        (usage_tokens, "usage") if usage_tokens is not None else (chunks, "chunks"))
    record.success = True
    return record
