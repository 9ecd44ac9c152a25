"""One chat through the app's own websocket: Chainlit 2.12's socket.io protocol.

What ``qa-load`` speaks instead of a browser (the protocol is described in
``server.loadtest.chat.qa_load``), and what each chat saw (``SessionRecord``), so
that the run can check every chat got its own complete reply.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import httpx

from server.errors import LoadTestError


class QaLoadError(LoadTestError):
    """A qa-load run that cannot start (no app, login required, bad arguments); the message says why."""


SOCKET_PATH = "/ws/socket.io"
# Connecting many sockets at once on a busy small machine takes seconds, not the default 1 s.
CONNECT_TIMEOUT_S = 30.0
# Events that carry a chat message's id: the ones that must never reach another chat.
MESSAGE_EVENTS = {"new_message", "update_message", "delete_message", "stream_start", "stream_token"}
# app/chat.py ends a finished reply with the figures (app/texts.figures_line) as a paragraph
# of their own, which gives the speed in tok/s in every language.
FIGURES_TAIL = re.compile(r"\n\n[^\n]*tok/s[^\n]*")
SHOWN_ERROR = "the app showed an error: "
TAG = re.compile(r"\[qa [0-9a-f]{6} s\d+\]")
# The reply's token count in its figures line: "... + 212 reply tokens" / "... + 回复 212 个 token".
REPLY_TOKENS = re.compile(r"\+ (?:回复 )?(\d+)")
# Starts app/texts "continued" in the figures line, in every language: the reply's engine
# stopped and the reply went on on another (app/failover.py).
CONTINUED_MARK = "↻"
# socket.io's browser client after a lost connection: tries again after 1 s, doubling up to
# 5 s (its reconnectionDelay, reconnectionDelayMax), here for about a minute in all.
RECONNECT_DELAYS_S = (1.0, 2.0, 4.0) + (5.0,) * 10
# After coming back, how long a chat waits for its reply to show signs of life: a worker
# taking over a dead one's reply waits for its writer to be quiet first (app/in_flight.py).
REJOIN_WAIT_S = 30.0
# Between two messages, how many sockets a chat opens before one stays open until the chat
# opened on it: the worker one reaches may be drained right then (`ernie-chat restart`) and
# close it, and the browser's client simply reconnects again, to another worker.
REOPEN_TRIES = 3


@dataclass
class SessionRecord:
    """What one chat saw; ``open_s`` from connecting, the other times from sending its message."""

    index: int
    tag: str
    prompt: str
    welcomed: bool = False
    moved: bool = False            # the app said the chat lost its app process
    resumed: bool = False          # the app reopened the chat from its saved steps
    thread_id: str = ""            # the chat's thread, once the app started one
    reconnects: int = 0            # times its socket came back after dropping
    # Times a socket opened again between two messages closed before the chat opened on it,
    # and another was opened (REOPEN_TRIES): the chat's, over all its messages.
    reopen_retries: int = 0
    open_s: Optional[float] = None  # connect to welcome: what a new browser tab waits
    ttft_s: Optional[float] = None
    total_s: Optional[float] = None
    # When the message went out, on the machine's monotonic clock (time.perf_counter on
    # Linux): the app's usage log stamps its side on the same clock (ReplyStats.stamps).
    sent_at: Optional[float] = None
    reply_id: Optional[str] = None
    streamed: str = ""            # stream_start's text plus every stream_token of the reply
    final: Optional[str] = None   # the reply as the app sent it last
    message_ids: set[str] = field(default_factory=set)
    tags_seen: set[str] = field(default_factory=set)
    error: str = ""
    refused: str = ""             # the app answered with a limit or busy refusal: REFUSALS
    busy_waited: bool = False     # the app said the engine was busy, then answered
    notice: str = ""              # that refusal's or busy notice's text

    @property
    def replied(self) -> bool:
        return self.final is not None

    @property
    def complete(self) -> bool:
        """The final text is the streamed text, nothing lost or added, then the figures line.

        After a reconnect the frames sent while the socket was away never came (the browser
        too shows the final text, which replaces them): the reply then ends in the figures."""
        if self.reconnects and self.final and self.streamed:
            figures = FIGURES_TAIL.search(self.final)
            return figures is not None and figures.end() == len(self.final) and figures.start() > 0
        if not self.streamed or self.final is None or not self.final.startswith(self.streamed):
            return False
        return FIGURES_TAIL.fullmatch(self.final[len(self.streamed):]) is not None

    @property
    def reply_tokens(self) -> Optional[int]:
        """The engine's count of the reply's tokens, as the figures line gives it."""
        figures = FIGURES_TAIL.search(self.final or "")
        found = REPLY_TOKENS.search(figures.group()) if figures else None
        return int(found.group(1)) if found else None

    @property
    def continued(self) -> bool:
        """The reply's engine stopped under it and the reply went on on another, as its
        figures line says."""
        figures = FIGURES_TAIL.search(self.final or "")
        return figures is not None and CONTINUED_MARK in figures.group()

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(message_ids=sorted(self.message_ids), tags_seen=sorted(self.tags_seen),
                   replied=self.replied, complete=self.complete, reply_tokens=self.reply_tokens,
                   continued=self.continued)
        return out

    @classmethod
    def from_dict(cls, chat: dict) -> "SessionRecord":
        """A record back from :meth:`as_dict` (another qa-load process's chat)."""
        names = {f.name for f in fields(cls)}
        record = cls(**{k: v for k, v in chat.items() if k in names})
        record.message_ids, record.tags_seen = set(chat["message_ids"]), set(chat["tags_seen"])
        return record

    @property
    def outcome(self) -> str:
        """What became of the message: see :func:`outcome_of`."""
        return outcome_of(self)


# The app's answers instead of a reply (app/chat.py limit_hit, by their message's kind): the
# user was over a limit, or the engine's queue was full with ERNIE_BUSY_ACTION=refuse.
LIMITED, BUSY_REFUSED = "limited", "busy_refused"
REFUSALS = (LIMITED, BUSY_REFUSED)
OUTCOMES = ("complete", "continued", "busy_waited", *REFUSALS, "failed", "lost")


def outcome_of(record: SessionRecord) -> str:
    """``complete``; ``continued``: complete after the socket came back (a reconnect, or the
    reply carried on by another worker) or after its engine stopped under it (the figures
    line's mark); ``busy_waited``: complete after the app said the engine was busy;
    ``limited`` / ``busy_refused``: the app answered that the user is over a limit, or that
    the engine is too busy, and when to try again; ``failed``: the app said what went wrong
    (an error, or that the chat moved and its reply is gone); ``lost``: no reply and no word."""
    if record.complete:
        if record.reconnects or record.continued:
            return "continued"
        return "busy_waited" if record.busy_waited else "complete"
    if record.refused:
        return record.refused
    if record.error.startswith(SHOWN_ERROR) or record.moved:
        return "failed"
    return "lost"


def user_step(text: str) -> dict:
    """A user message as the Chainlit frontend builds it."""
    return {"threadId": "", "id": str(uuid.uuid4()), "name": "User", "type": "user_message",
            "output": text, "createdAt": datetime.now(timezone.utc).isoformat(), "metadata": {}}


class ChatSession:
    """One chat of the app, seen as its browser tab would see it."""

    def __init__(self, record: SessionRecord, reconnect: bool = False, chat_profile: str = ""):
        # Imported here: the CLI that lists this command also runs where only the engine
        # environment is (bench on a GPU machine), which has no python-socketio.
        import socketio
        self._socket_errors = (socketio.exceptions.SocketIOError, OSError)
        self.record = record
        # As a browser tab: a dropped socket comes back with the same session id and cookies.
        self.reconnect = reconnect
        self.chat_profile = chat_profile  # the app's model picker: a served name (ERNIE_MODELS)
        self.session_id = str(uuid.uuid4())
        self._url, self._headers = "", {}
        self.sio = self._client()
        self.dropped = asyncio.Event()
        self._rejoining = False           # the next task_end is the reconnect's, not the turn's
        self._rejoined = asyncio.Event()  # the app shows the turn goes on after a reconnect
        self.refusal = ""  # why the app refused the connection: the exception does not say
        self.opened = asyncio.Event()     # on_chat_start ended (welcome or error) or the socket did
        self._starting = False            # on_chat_start runs (between its task_start and task_end)
        self.turn_done = asyncio.Event()
        self.sent_at: Optional[float] = None
        self._in_turn = False
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
        async with httpx.AsyncClient(timeout=CONNECT_TIMEOUT_S) as http:
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

    def next_turn(self, prompt: str) -> None:
        """Forget the last turn's reply so ask() can send ``prompt`` in the same chat."""
        record = self.record
        record.prompt, record.reply_id, record.streamed, record.final, record.error = prompt, None, "", None, ""
        record.refused, record.busy_waited, record.notice = "", False, ""
        record.reconnects = 0
        record.ttft_s = record.total_s = record.sent_at = self.sent_at = None
        self.turn_done.clear()
        self._in_turn = False

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

    def _on_event(self, event: str, data=None) -> None:
        record = self.record
        if not isinstance(data, dict):  # chat_settings, token_usage ...: nothing of a reply
            return
        if event in MESSAGE_EVENTS and data.get("id"):
            record.message_ids.add(data["id"])
        for value in data.values():  # output, token, and first_interaction's copy of the prompt
            if isinstance(value, str):
                record.tags_seen.update(TAG.findall(value))
        metadata = data.get("metadata")  # a saved thread's may come as JSON text (SQLite)
        kind = metadata.get("kind") if isinstance(metadata, dict) else None
        if event == "first_interaction":
            record.thread_id = data.get("thread_id") or record.thread_id
        elif event == "resume_thread":  # a chat reopened from its saved steps: no welcome
            record.resumed = True
            self.opened.set()
        elif event == "task_start":
            self._in_turn = self.sent_at is not None
            self._starting = not self._in_turn
        elif event == "task_end" and self._starting:
            # on_chat_start's or a resume's, also when the socket came back between two
            # messages and the chat started again there: never a turn's end.
            self._starting = False
            self._open_when_started()
        elif event == "task_end" and self._rejoining:
            pass  # the reconnect's and the resume's, not the turn's: its reply must show again
        elif event == "task_end" and self._in_turn:
            self.turn_done.set()
        elif event == "stream_start" and kind == "reply" and record.reply_id in (None, data["id"]):
            # Again after a reconnect: the reply as far as it got, carried on from there.
            if record.reply_id is None:
                record.ttft_s = self._since_sent()
            record.reply_id, record.streamed = data["id"], data.get("output") or ""
            self._reply_shows()
        elif event == "stream_token" and data.get("id") == record.reply_id:
            token = data.get("token") or ""
            record.streamed = token if data.get("isSequence") else record.streamed + token
            self._reply_shows()
        elif event in ("new_message", "update_message"):
            if kind == "welcome":
                record.welcomed = True
                self._open_when_started()
            elif kind == "moved":  # a chat resumed on another worker: it opens with this notice
                record.moved = True
                self._open_when_started()
                if (self._rejoining and not record.resumed and self.sent_at is not None
                        and not metadata.get("kept")):
                    # A new chat there, which found nothing of this one: the reply is gone, as
                    # the app says. A kept chat's reply shows again (app/live_chats.py).
                    record.error = "the chat moved to another app process, which lost the reply"
                    self.turn_done.set()
            elif kind == "error":
                record.error = SHOWN_ERROR + (data.get("output") or "")[:200]
                self._open_when_started()
            elif kind in REFUSALS:
                record.refused, record.notice = kind, data.get("output") or ""
            elif kind == "busy":
                record.busy_waited, record.notice = True, data.get("output") or ""
            elif kind == "reply" and record.reply_id in (None, data["id"]):
                # An empty reply is never streamed: it comes only as this message.
                record.reply_id, record.final = data["id"], data.get("output") or ""
                record.total_s = self._since_sent()
                self._reply_shows()

    def _reply_shows(self) -> None:
        if self._rejoining:
            self._rejoining = False
            self._rejoined.set()

    def _open_when_started(self) -> None:
        """The chat is open once on_chat_start is over and its first message came, in either
        order: the app sends the welcome after on_chat_start's task_end (app/session_tasks.py)."""
        if (self.record.welcomed or self.record.moved or self.record.error) and not self._starting:
            self.opened.set()

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

    def _since_sent(self) -> Optional[float]:
        return None if self.sent_at is None else time.perf_counter() - self.sent_at


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


def count_crossed(records: list[SessionRecord]) -> int:
    """Messages that reached a chat they do not belong to.

    A message id seen in k chats counts k - 1 times; a tag of another chat in
    the text a chat received counts once per tag.
    """
    chats_of: dict[str, int] = {}
    for record in records:
        for message_id in record.message_ids:
            chats_of[message_id] = chats_of.get(message_id, 0) + 1
    by_id = sum(n - 1 for n in chats_of.values())
    by_tag = sum(len(record.tags_seen - {record.tag}) for record in records)
    return by_id + by_tag


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
