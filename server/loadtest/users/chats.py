"""One simulated user's chat, through the app's websocket or straight to the engine.

The user model (``server.loadtest.users.model``) drives either kind the same way:
``open``, then ``ask`` once per turn, then ``close``.  ``ask`` returns what the
user saw of one reply (a :class:`Reply`); what could cross between chats is
checked on the app's side only, since the engine's streams are separate HTTP
responses. ``Target`` says where the users go, and ``chat_factory`` checks it answers
and builds each user's chat for it.
"""

from __future__ import annotations

import time
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

import httpx

from server.errors import LoadTestError
from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.chat_socket import ChatSession, check_app
from server.loadtest.lib.config import BenchConfig
from server.loadtest.lib.stream import StreamConnection, StreamError
from server.loadtest.lib.target import served_model
from server.loadtest.users.history import DirectHistory


@dataclass
class Reply:
    """One turn as its user saw it; times in seconds from sending the message."""

    ttft_s: Optional[float] = None
    total_s: Optional[float] = None
    tokens: Optional[int] = None  # the engine's count of the reply's tokens
    complete: bool = False
    error: str = ""
    outcome: str = ""  # chat_record.OUTCOMES: complete, continued, failed or lost


class Chat(Protocol):
    session: Optional[ChatSession]  # the app's chat, for the crossed-reply check; None direct

    async def open(self) -> str:
        """Open the chat; an error message, or "" when it is ready."""

    async def ask(self, prompt: str) -> Reply:
        """Send ``prompt`` and wait for the whole reply."""

    async def close(self) -> None: ...


class AppChat:
    """A chat of the app through its websocket, as a browser tab (chat_socket)."""

    def __init__(self, url: str, index: int, tag: str, cookie: str = "", address: str = "",
                 chat_profile: str = ""):
        headers = {"Cookie": cookie} if cookie else {}
        if address:
            headers["X-Forwarded-For"] = address
        self.url, self.headers = url, headers or None
        # Reconnects as the browser's socket.io client does (same session id, its cookies).
        self.session = ChatSession(SessionRecord(index, tag, prompt=""), reconnect=True,
                                   chat_profile=chat_profile)

    async def open(self) -> str:
        ok = await self.session.open(self.url, headers=self.headers)
        return "" if ok else (self.session.record.error or "the chat did not open")

    async def ask(self, prompt: str) -> Reply:
        self.session.next_turn(prompt)
        await self.session.ask()
        record = self.session.record
        return Reply(record.ttft_s, record.total_s, record.reply_tokens,
                     record.complete and record.reply_tokens is not None, record.error, record.outcome)

    async def close(self) -> None:
        await self.session.close()


class EngineChat:
    """A chat sent straight to the engine's OpenAI API, with its history each turn.

    Like the app it sends the system prompt, the earlier exchanges that fit the model's
    window (``history``) and the new message with the app's sampling settings, streams
    the reply and asks for the usage (the exact token count).
    """

    session = None

    def __init__(self, base_url: str, api_key: Optional[str], model: str, system_prompt: str,
                 sampling: dict, timeout_s: float, window: Optional[int] = None):
        self.conn = StreamConnection(base_url, api_key, timeout_s)
        self.model, self.sampling = model, sampling  # max_tokens, temperature, ... as the app sends
        self.history = DirectHistory(system_prompt, window, sampling.get("max_tokens", 0))

    async def open(self) -> str:
        return ""  # nothing to open: each turn is a request of its own

    async def ask(self, prompt: str) -> Reply:
        body = {"model": self.model, "messages": self.history.messages(prompt),
                **self.sampling, "stream": True, "stream_options": {"include_usage": True}}
        reply, pieces, finished, prompt_tokens = Reply(), [], False, None
        started = time.perf_counter()
        try:
            stream = self.conn.events("/v1/chat/completions", body)
            async with aclosing(stream):
                async for chunk in stream:
                    for choice in chunk.get("choices") or ():
                        if text := (choice.get("delta") or {}).get("content"):
                            if reply.ttft_s is None:
                                reply.ttft_s = time.perf_counter() - started
                            pieces.append(text)
                        finished = finished or bool(choice.get("finish_reason"))
                    if usage := chunk.get("usage"):
                        reply.tokens, prompt_tokens = usage.get("completion_tokens"), usage.get("prompt_tokens")
        except (StreamError, ValueError) as exc:
            reply.error, reply.outcome = str(exc) or type(exc).__name__, "failed"
            return reply
        reply.total_s = time.perf_counter() - started
        reply.complete = bool(pieces) and finished and reply.tokens is not None
        reply.outcome = "complete" if reply.complete else "lost"
        if not reply.complete:
            reply.error = "the stream ended without a whole reply"
        self.history.add(prompt, "".join(pieces), prompt_tokens, reply.tokens)
        return reply

    async def close(self) -> None:
        self.conn.close()


# --- where the users go --------------------------------------------------------------

PATHS = ("app", "engine")


def user_address(index: int) -> str:
    """A made-up client address for user ``index`` (from 10.77.0.1 on), sent as
    X-Forwarded-For.  The app trusts that header only from its own machine (uvicorn's
    forwarded_allow_ips, 127.0.0.1; HAProxy appends the load's real address, which is
    trusted), so a load run elsewhere is counted as one address, as it should be."""
    return f"10.77.{index // 250}.{index % 250 + 1}"


@dataclass(frozen=True)
class Target:
    """Where the users go, and what a direct chat sends (the app decides that itself)."""

    through: str                 # "app" or "engine"
    url: str
    api_key: Optional[str] = None
    system_prompt: str = ""
    max_tokens: int = 512
    ignore_eos: bool = False
    temperature: Optional[float] = None  # None: the engine's default
    top_p: Optional[float] = None
    # The app's login for every chat (qa-load --login); it reaches client processes on stdin.
    cookie: str = field(default="", repr=False)
    # Each user from an address of its own (qa-load --own-addresses): the per-user limits
    # without login count by address.
    own_addresses: bool = False
    chat_profile: str = ""       # the app's model (qa-load/capacity --model, ERNIE_MODELS)
    api_key_from: str = ""       # where the key came from (server/engine_key.py)

    def sampling(self) -> dict:
        """What a direct chat sends besides the messages, as the app would."""
        body = {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p}
        body = {k: v for k, v in body.items() if v is not None}
        return {**body, "ignore_eos": True} if self.ignore_eos else body


async def chat_factory(target: Target, reply_timeout_s: float) -> Callable[[int, str], Chat]:
    """Check the target answers, then return a function that builds one user's chat."""
    if target.through == "app":
        await check_app(target.url, logged_in=bool(target.cookie))
        return lambda index, tag: AppChat(target.url, index, tag, target.cookie,
                                          user_address(index) if target.own_addresses else "",
                                          target.chat_profile)
    if target.through != "engine":
        raise LoadTestError(f"--through must be one of {', '.join(PATHS)} (got {target.through!r}).")
    cfg = BenchConfig(url=target.url, api_key=target.api_key, api_key_from=target.api_key_from)
    async with httpx.AsyncClient(timeout=10.0) as http:
        model, window = await served_model(http, cfg)
    return lambda index, tag: EngineChat(target.url, target.api_key, model, target.system_prompt,
                                         target.sampling(), reply_timeout_s, window)
