"""One chat through the app's own websocket: Chainlit 2.12's socket.io protocol.

What ``qa-load`` speaks instead of a browser (the protocol is described in
``server.loadtest.chat.qa_load``): a :class:`ChatSession` connects as a browser tab does,
sends each message, and reconnects as the browser's socket.io client does when its socket
drops; what the app's events mean for the chat is ``chat_events``, what the chat saw is its
``chat_record.SessionRecord``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import httpx

from server import tls_contexts
from server.errors import LoadTestError
from server.loadtest.lib.chat_events import ChatEvents
from server.loadtest.lib.chat_record import SessionRecord


class QaLoadError(LoadTestError):
    """A qa-load run that cannot start (no app, login required, bad arguments); the message says why."""


SOCKET_PATH = "/ws/socket.io"
# Connecting many sockets at once on a busy small machine takes seconds, not the default 1 s.
CONNECT_TIMEOUT_S = 30.0
# socket.io's browser client after a lost connection: tries again after 1 s, doubling up to
# 5 s (its reconnectionDelay, reconnectionDelayMax), here for about a minute in all.
RECONNECT_DELAYS_S = (1.0, 2.0, 4.0) + (5.0,) * 10
# After coming back, how long a chat waits for its reply to show signs of life: a worker
# taking over a dead one's reply waits for its writer to be quiet first (app/conversation/in_flight.py).
REJOIN_WAIT_S = 30.0
# Between two messages, how many sockets a chat opens before one stays open until the chat
# opened on it: the worker one reaches may be drained right then (`ernie-chat restart`) and
# close it, and the browser's client simply reconnects again, to another worker.
REOPEN_TRIES = 3


def user_step(text: str) -> dict:
    """A user message as the Chainlit frontend builds it."""
    return {"threadId": "", "id": str(uuid.uuid4()), "name": "User", "type": "user_message",
            "output": text, "createdAt": datetime.now(timezone.utc).isoformat(), "metadata": {}}


class ChatSession(ChatEvents):
    """One chat of the app, seen as its browser tab would see it."""

    def __init__(self, record: SessionRecord, reconnect: bool = False, chat_profile: str = ""):
        super().__init__(record)
        # Imported here: the CLI that lists this command also runs where only the engine
        # environment is (bench on a GPU machine), which has no python-socketio.
        import socketio
        self._socket_errors = (socketio.exceptions.SocketIOError, OSError)
        # As a browser tab: a dropped socket comes back with the same session id and cookies.
        self.reconnect = reconnect
        self.chat_profile = chat_profile  # the app's model picker: a served name (ERNIE_MODELS)
        self.session_id = str(uuid.uuid4())
        self._url, self._headers = "", {}
        self.sio = self._client()
        self.dropped = asyncio.Event()
        self.refusal = ""  # why the app refused the connection: the exception does not say
        self._closing = False
        self._reopening = False           # between two messages, the chat opens on a new socket

    async def open(self, url: str, headers: Optional[dict] = None, thread_id: str = "") -> bool:
        """Connect and wait for the welcome; False (with the reason recorded) if it fails.

        ``headers`` carries cookies (a login, the balancer's worker pin); ``thread_id``
        reconnects to an existing chat, as a browser does after losing its connection.
        """
        started = time.perf_counter()
        self._url, self._headers = url, dict(headers or {})
        try:
            if self.reconnect:
                await self._load_page()
            await self._connect(thread_id)
        except httpx.HTTPError as exc:
            self.record.error = f"the chat page did not load: {str(exc) or type(exc).__name__}"
            return False
        except self._socket_errors as exc:
            self.record.error = connect_failure(self.refusal, exc)
            return False
        await self.opened.wait()
        self.record.open_s = time.perf_counter() - started
        return (self.record.welcomed or self.record.moved or self.record.resumed) and not self.record.error

    async def ask(self) -> None:
        if self.dropped.is_set() and not await self._back_between_turns():
            return
        self.sent_at = self.record.sent_at = time.perf_counter()
        try:
            await self.sio.emit("client_message", {"message": user_step(self.record.prompt),
                                                   "fileReferences": []})
        except self._socket_errors as exc:
            self.record.error = f"sending failed: {str(exc) or type(exc).__name__}"
            return
        await self._wait_turn()
        if not self.record.replied and not self.record.error and not self.record.refused:
            self.record.error = "the turn ended without a reply"

    def _client(self):
        import socketio
        # Offer permessage-deflate as browsers do: the app then compresses every frame.
        sio = socketio.AsyncClient(reconnection=False, request_timeout=CONNECT_TIMEOUT_S,
                                   websocket_extra_options={"compress": 15})
        sio.on("*", self._on_event)  # a plain function: handlers then run in arrival order
        sio.on("connect_error", self._on_refused)
        sio.on("disconnect", self._on_disconnect)
        return sio

    async def _load_page(self) -> None:
        """As a browser tab: the page first, for its cookies (the balancer's worker pin, the
        app process's boot id, by which the app tells a chat that lost its process)."""
        async with httpx.AsyncClient(timeout=CONNECT_TIMEOUT_S, verify=tls_contexts.shared()) as http:
            page = await http.get(f"{self._url}/", headers=self._headers)
        cookies = [self._headers.get("Cookie", "")] + [f"{k}={v}" for k, v in page.cookies.items()]
        self._headers["Cookie"] = "; ".join(c for c in cookies if c)

    async def _connect(self, thread_id: str) -> None:
        await self.sio.connect(
            self._url, socketio_path=SOCKET_PATH, transports=["websocket"],
            # A copy: engine.io takes the Cookie header out of the dict it is given.
            wait_timeout=CONNECT_TIMEOUT_S, headers=dict(self._headers),
            auth={"sessionId": self.session_id, "clientType": "webapp", "threadId": thread_id,
                  "userEnv": "{}", "chatProfile": self.chat_profile})
        await self.sio.emit("connection_successful")

    async def _wait_turn(self) -> None:
        """Until the turn ends; with ``reconnect``, a dropped socket comes back first."""
        while True:
            await first_set(self.turn_done, self.dropped)
            if self.turn_done.is_set() or not await self._come_back():
                return
            # The app shows the turn goes on (Stop again, the reply streams) or it is gone.
            if not await first_set(self.turn_done, self._rejoined, self.dropped, timeout_s=REJOIN_WAIT_S):
                self.turn_done.set()  # back, but the reply never showed again: lost
                return

    async def _back_between_turns(self) -> bool:
        """The socket dropped while the user read or thought: back before the next message,
        once the chat is open again (resumed, or started afresh on another worker), on a
        socket that stayed open until then (REOPEN_TRIES)."""
        self._reopening = True
        try:
            for tries_left in reversed(range(REOPEN_TRIES)):
                self.opened.clear()
                if not await self._come_back():
                    return False
                if not await first_set(self.opened, self.dropped, timeout_s=REJOIN_WAIT_S):
                    self.record.error = "the chat did not open again after its socket came back"
                    return False
                if not self.dropped.is_set():
                    break
                if not tries_left:
                    self.record.error = (f"the chat's socket closed {REOPEN_TRIES} times in a row "
                                         "before the chat opened again")
                    return False
                self.record.reopen_retries += 1
        finally:
            self._reopening = False
        self._rejoining = False
        self.record.reconnects = 0  # between two messages: not this message's
        return True

    async def _come_back(self) -> bool:
        """Reconnect as socket.io's browser client does: same session id, cookies and thread."""
        self.dropped.clear()
        self._rejoined.clear()
        self.record.resumed = False
        failure = ""
        for delay in RECONNECT_DELAYS_S:
            await asyncio.sleep(delay)
            self.sio = self._client()
            self._rejoining = True
            try:
                await self._connect(self.record.thread_id)
            except self._socket_errors as exc:
                failure = connect_failure(self.refusal, exc)
                await self.sio.eio.disconnect()
                continue
            self.record.reconnects += 1
            return True
        self.record.error = self.record.error or f"the app closed the connection and did not come back ({failure})"
        return False

    async def close(self) -> None:
        self._closing = True
        try:
            if self.sio.connected:
                # As the frontend's "new chat": the app forgets the session now, not in an hour.
                await self.sio.emit("clear_session")
                await self.sio.disconnect()
            else:
                await self.sio.eio.disconnect()  # a failed connect leaves its HTTP session open
        except self._socket_errors:
            pass  # the chat is gone either way

    def _on_refused(self, data=None) -> None:
        if isinstance(data, dict):  # the app's reason; a failed transport gives a plain string
            self.refusal = str(data.get("message", data))

    def _on_disconnect(self, reason=None) -> None:
        if self.reconnect and not self._closing and (self.opened.is_set() or self._reopening):
            self.dropped.set()  # the turn, or the next one, waits for the socket to come back
        elif not self._closing:
            self.record.error = self.record.error or "the app closed the connection"
            self.opened.set()
            self.turn_done.set()


async def first_set(*events: asyncio.Event, timeout_s: Optional[float] = None) -> bool:
    """Wait until one of ``events`` is set; False if none was within ``timeout_s``."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        done, _ = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    return bool(done)


async def check_app(url: str, logged_in: bool = False) -> None:
    """Fail at once, with one message, where no chat could open (``logged_in``: the chats
    will carry a login, ``--login``).

    Chainlit refuses the socket of a client that is not logged in with no reason
    given (it raises the builtin ConnectionRefusedError), so ask the app first.
    """
    try:
        async with httpx.AsyncClient(timeout=CONNECT_TIMEOUT_S) as http:
            response = await http.get(f"{url}/auth/config")
        auth = response.json() if response.status_code == 200 else None
    except httpx.HTTPError as exc:
        raise QaLoadError(f"No chat app answers at {url} ({type(exc).__name__}): start it "
                          "(./scripts/up) or pass --url.") from None
    except ValueError:
        auth = None
    if not isinstance(auth, dict) or "requireLogin" not in auth:
        raise QaLoadError(f"{url} does not answer as a Chainlit app (GET /auth/config).")
    if auth["requireLogin"] and not logged_in:  # null without login, not false
        raise QaLoadError(f"The app at {url} requires login (ERNIE_USERS): give qa-load "
                          "--login NAME with the password in ERNIE_QA_PASSWORD.")
    if logged_in and not auth["requireLogin"]:
        raise QaLoadError(f"The app at {url} has no login (no ERNIE_USERS): leave out --login.")


def connect_failure(refusal: str, exc: BaseException) -> str:
    if refusal:
        return f"the app refused the connection: {refusal}"
    return f"connect failed: {str(exc) or type(exc).__name__}"


# --- what the chats send ------------------------------------------------------------

DEFAULT_PROMPTS = (
    "Tell me about the weather today.",
    "Write a short poem about the sea.",
    "What is a good name for a black cat?",
    "Explain in two sentences how a bicycle works.",
    "今天天气怎么样？",
    "给我讲一个关于月亮的小故事。",
    "List three fruits that are red.",
    "How do I boil an egg?",
)


def read_prompts(path: Optional[Path]) -> list[str]:
    """One prompt per non-empty line of the file, or the built-in ones."""
    if path is None:
        return list(DEFAULT_PROMPTS)
    prompts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        raise QaLoadError(f"{path} has no prompt (one per line).")
    return prompts
