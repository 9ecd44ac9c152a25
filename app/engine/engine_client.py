"""Talk to the engine through the official OpenAI client: stream a reply and time it.

Nothing here knows about Chainlit, so the integration tests drive exactly the
code the app uses against a real vLLM.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Iterator, Optional

import aiohttp
import httpx
import httpx2
import openai
from openai import AsyncOpenAI

from app.engine.idle_deadline import IdleDeadline
from server.settings import Settings, auth_headers


def make_client(settings: Settings) -> AsyncOpenAI:
    """The chat's client: the SDK's own, sending through aiohttp (its ``DefaultAioHttpClient``).

    Its default transport, httpcore's pool, walks every connection on each request and on
    each response's end, probing each idle one's socket (``getpeername`` and ``poll``): in
    a burst, with a hundred connections kept, that was 19 % of a worker's CPU, and a request
    cost 3.4-3.8 ms of CPU against 1.4-2.1 ms through aiohttp; a worker's message, 8.1 ms
    against 5.1 (docs/performance.md, "The HTTP client's pool"). Requests, errors and timeouts stay
    the SDK's: the transport turns aiohttp's exceptions into httpx2's (see ``error_kind``).
    """
    # The read timeout bounds the wait for the *next* bytes rather than the whole reply: a long
    # answer never times out, a hung engine does. A reply's stream keeps it on its own timer
    # (stream_reply); the client's other requests, as aiohttp's sock_read.
    timeout = httpx.Timeout(connect=5.0, read=settings.request_timeout_s, write=10.0, pool=5.0)
    # Idle connections go well before the engine closes them (settings.engine_keepalive_s): a
    # request sent on one just as the server closes it would fail as "engine not reachable".
    limits = httpx2.Limits(max_connections=1000, keepalive_expiry=settings.app_keepalive_s)
    return AsyncOpenAI(
        base_url=f"{settings.engine_base_url}/v1",
        api_key=settings.api_key_value or "not-needed",
        timeout=timeout,
        max_retries=0,  # a retried chat request would double-bill the GPU and confuse Stop
        http_client=openai.DefaultAioHttpClient(limits=limits),
    )


@dataclass
class ReplyStats:
    """Figures shown under a reply; token counts come from the stream's usage.

    Times are ``time.perf_counter()``, which on Linux reads the machine's monotonic clock
    (CLOCK_MONOTONIC, as ``time.monotonic``): other processes of the machine can compare them.
    """

    started: float = field(default_factory=time.perf_counter)  # the request to the engine
    asked_at: Optional[float] = None  # the user's message reached the chat's handler
    first_token_at: Optional[float] = None
    finished_at: Optional[float] = None
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    finish_reason: Optional[str] = None
    continued: int = 0  # times the reply went on on another engine after its own stopped
    pieces: int = 0  # text pieces the server streamed (one per token at vLLM's default interval)

    @property
    def ttft_s(self) -> Optional[float]:
        return None if self.first_token_at is None else self.first_token_at - self.started

    @property
    def user_ttft_s(self) -> Optional[float]:
        """As the user waited: from the message (or, without its time, the request) to the
        first token."""
        if self.first_token_at is None:
            return None
        return self.first_token_at - (self.asked_at if self.asked_at is not None else self.started)

    def stamps(self) -> dict:
        """When the message came, the request went and the first token came back, for a load
        test to split a chat's first-token time between processes (benchmarks/gpu/burst_table.py)."""
        return {"message": self.asked_at, "request": self.started, "first_token": self.first_token_at}

    @property
    def tokens_per_s(self) -> Optional[float]:
        """Decode speed: reply tokens after the first, over the time after the first."""
        if not (self.completion_tokens and self.first_token_at and self.finished_at):
            return None
        span = self.finished_at - self.first_token_at
        return (self.completion_tokens - 1) / span if span > 0 and self.completion_tokens > 1 else None


# openai 3.x sends through httpx2, whose errors are not httpx's. A stream that breaks
# or stalls while we read it is reported with the SDK's own exceptions, as its typed
# stream does, so error_kind tells the user "cut" or "timeout", not "internal".
READ_TIMEOUTS = (httpx2.TimeoutException, httpx.TimeoutException)
READ_FAILURES = (httpx2.TransportError, httpx.TransportError)
# vLLM's usage in every chunk, not only the last: a reply cut mid-stream is continued with
# max_tokens less what it had, and its figures count both parts (app/engine/continuation.py).
LIVE_USAGE = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def checked(chunk):
    """A decoded chunk, or openai.APIError for an error sent inside a 200 stream (vLLM does
    that, docs/notes.md), as the SDK's own stream reader would raise."""
    if isinstance(chunk, dict) and chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else None
        raise openai.APIError(message if isinstance(message, str) and message
                              else "An error occurred during streaming", request=None, body=error)
    return chunk


def sse_chunk(line: str) -> Optional[dict]:
    """The JSON of one ``data:`` line of the event stream; None for anything else."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if not data or data == "[DONE]":
        return None
    return checked(json.loads(data))


def sse_payloads(buffered: bytes) -> tuple[list[bytes], bytes]:
    """The ``data:`` payloads of the complete lines in ``buffered`` (not ``[DONE]``), and the
    unfinished last line, to be read on with the next bytes (a line split between two reads
    is never decoded in halves, so a character split between them neither)."""
    *lines, rest = buffered.split(b"\n")
    payloads = [data for line in lines if line.startswith(b"data:")
                and (data := line[5:].strip()) and data != b"[DONE]"]
    return payloads, rest


def sse_chunks(payloads: list[bytes]) -> Iterator:
    """The payloads' JSON, in order, each ``checked``. Several are decoded in one call, as one
    JSON array (the decoder's start-up is most of what a small chunk costs); where that
    fails, one at a time, so that the error is the bad payload's and those before it come
    first."""
    if len(payloads) > 1:
        try:
            chunks = json.loads(b"[" + b",".join(payloads) + b"]")
        except ValueError:
            pass
        else:
            yield from map(checked, chunks)
            return
    for data in payloads:
        yield checked(json.loads(data))


async def stream_reply(
    client: AsyncOpenAI,
    model: str,
    messages: list[dict],
    stats: ReplyStats,
    *,
    temperature: float,
    top_p: float,
    max_tokens: int,
    extra_body: Optional[dict] = None,
) -> AsyncIterator[str]:
    """Yield the reply's text as it arrives, filling ``stats`` on the way: one piece per read
    of the HTTP stream, holding every token that read brought.

    A crowd's tokens pile up in the socket while the event loop serves other chats, so one
    read often holds many of vLLM's events (one per token at its default stream interval):
    they are decoded in one JSON call and passed up as one piece, so the layers above
    (failover, the live view's count, the batcher) run once per read instead of once per
    token (docs/performance.md, "The app's cost per token"). The text is the same; the first
    token still goes up the moment its read comes.

    The official client sends the request and turns HTTP errors into its exceptions;
    the chunks are read as plain JSON lines.  The SDK's own stream builds a typed
    object per chunk: 100-116 us of CPU per token here against 4.5 us for this
    (benchmarks/cpu-vs-vllm-bench.md), which cost the chat 4-10 % of the demo model's
    tokens/s on 2 cores.

    The response is used inside ``async with`` so that leaving early (Stop, an error,
    a cancelled task) closes it, which makes vLLM abort the request instead of
    generating to the end for nobody.  Consume this generator inside
    ``contextlib.aclosing``: a cancel that lands in the *consumer's* loop body
    leaves the generator suspended at ``yield``, and without aclosing its
    ``async with`` only runs when the garbage collector gets to it, seconds later.
    """
    # The body goes as extra_body, which the client sends as given: its typed parameters
    # are walked against the SDK's TypedDicts first, 0.25 ms of CPU per message here, so
    # 1.2 ms for a first message and 9 ms for a 20-turn chat, on every request
    # (docs/performance.md, "The app's cost per message"). The typed ``messages`` it needs is
    # empty and replaced by the body's.
    body = {"messages": messages, "temperature": temperature, "top_p": top_p,
            "max_tokens": max_tokens, "stream_options": {"include_usage": True},
            **(extra_body or {})}  # vLLM's own sampling fields, e.g. ignore_eos for load tests
    # The client's read timeout becomes the reply's idle deadline, on one timer instead of one
    # per network read (app/engine/idle_deadline.py).
    limits = client.timeout if isinstance(client.timeout, httpx.Timeout) else None
    deadline = IdleDeadline(limits.read if limits else None)
    request = client.chat.completions.with_streaming_response.create(
        model=model, messages=(), stream=True, extra_body=body,
        **({"timeout": httpx.Timeout(limits.connect, read=None, write=limits.write, pool=limits.pool)}
           if limits else {}))
    try:
        async with request as response:
            try:
                rest = b""
                async for data in response.iter_bytes():
                    deadline.came()
                    payloads, rest = sse_payloads(rest + data)
                    texts: list[str] = []
                    try:
                        for chunk in sse_chunks(payloads):
                            texts += read_chunk(chunk, stats)
                    finally:  # what came before an error in the same read is shown first
                        if texts:
                            if stats.first_token_at is None:
                                stats.first_token_at = time.perf_counter()
                            stats.pieces += len(texts)
                            yield "".join(texts)
                    deadline.wait()
            except READ_TIMEOUTS as exc:
                raise openai.APITimeoutError(request=response.http_response.request) from exc
            except READ_FAILURES as exc:
                raise openai.APIConnectionError(request=response.http_response.request) from exc
    except asyncio.CancelledError:
        if deadline.expired_alone():
            raise openai.APITimeoutError(request=None) from None  # as the client's own timeout
        raise
    finally:
        deadline.close()
    stats.finished_at = time.perf_counter()


def read_chunk(chunk: dict, stats: ReplyStats) -> list[str]:
    """One chunk's usage and finish reason into ``stats``; its text pieces."""
    if usage := chunk.get("usage"):
        stats.prompt_tokens = usage.get("prompt_tokens")
        stats.completion_tokens = usage.get("completion_tokens")
    texts = []
    for choice in chunk.get("choices") or ():
        if choice.get("finish_reason"):
            stats.finish_reason = choice["finish_reason"]
        if text := (choice.get("delta") or {}).get("content"):
            texts.append(text)
    return texts


def causes(exc: Optional[BaseException]) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (``raise ... from``), newest first."""
    while exc is not None:
        yield exc
        exc = exc.__cause__


# What an API server whose engine core died answers, inside a stream or as an HTTP 500: the
# engine stopped, as when the connection closes.  vLLM's EngineDeadError (v1/engine/
# exceptions.py), and the RuntimeError of its output executor, already shut down, that a
# request arriving in the moment between the core's death and the server's sees.
ENGINE_DEAD = ("EngineCore encountered an issue", "cannot schedule new futures after shutdown")
# The connection broke after the request went: the engine closed it (it died or restarted
# under the request), which is not "nothing listens there".
CUT = (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, httpx2.ReadError,
       httpx2.RemoteProtocolError, httpx.ReadError, httpx.RemoteProtocolError)


def said(exc: BaseException) -> str:
    """An error's text, with the body of the HTTP answer behind it (httpx leaves it out)."""
    response = getattr(exc, "response", None)
    try:
        body = response.text if isinstance(response, (httpx.Response, httpx2.Response)) else ""
    except (httpx.ResponseNotRead, httpx2.ResponseNotRead):  # a stream's: its body is not read
        body = ""
    return f"{exc} {body}"


def error_kind(exc: BaseException) -> str:
    """Sort an exception from the client into the cases the chat explains differently."""
    found = list(causes(exc))
    # The aiohttp transport maps every aiohttp.ClientConnectionError, a refused or dropped
    # connection included, to httpx2.ConnectTimeout: what the engine did is in the cause.
    if any(isinstance(cause, aiohttp.ClientConnectorError) for cause in found):
        return "unreachable"
    if any(isinstance(cause, CUT) or (isinstance(cause, aiohttp.ClientConnectionError)
                                      and not isinstance(cause, asyncio.TimeoutError)) for cause in found):
        return "cut"
    if any(dead in said(cause) for cause in found for dead in ENGINE_DEAD):
        return "cut"  # vLLM's API server outlived its engine core for a moment
    if isinstance(exc, (openai.APITimeoutError, httpx.TimeoutException)):
        return "timeout"
    if isinstance(exc, (openai.APIConnectionError, httpx.TransportError)):
        return "unreachable"
    status = (exc.response.status_code if isinstance(exc, httpx.HTTPStatusError)
              else exc.status_code if isinstance(exc, openai.APIStatusError) else None)
    if status == 503:
        return "loading"
    if status == 502:  # the balancer's: the engine copy it chose closed the connection
        return "cut"
    if isinstance(exc, httpx.HTTPStatusError):
        return "engine_error"
    if isinstance(exc, openai.AuthenticationError):
        return "auth"
    if isinstance(exc, openai.BadRequestError):
        # vLLM and OpenAI say the first, llama.cpp's server the second.
        too_long = ("maximum context length", "exceeds the available context size")
        return "too_long" if any(s in str(exc) for s in too_long) else "bad_request"
    if isinstance(exc, openai.NotFoundError):
        return "model_missing"
    if isinstance(exc, openai.APIError):
        return "engine_error"
    return "internal"


async def count_tokens(http: httpx.AsyncClient, base_url: str, model: str,
                       messages: list[dict], api_key: Optional[str] = None) -> int:
    """Exact prompt length: vLLM's /tokenize applies the model's own chat template."""
    response = await http.post(
        f"{base_url}/tokenize",
        json={"model": model, "messages": messages, "add_generation_prompt": True},
        headers=auth_headers(api_key),
    )
    response.raise_for_status()
    return int(response.json()["count"])
