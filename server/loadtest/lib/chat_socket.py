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
TAG = re.compile(r"\[qa [0-9a-f]{6} s\d+\]")
# The reply's token count in its figures line: "... + 212 reply tokens" / "... + 回复 212 个 token".
REPLY_TOKENS = re.compile(r"\+ (?:回复 )?(\d+)")
# Starts app/texts "continued" in the figures line, in every language: the reply's engine
# stopped and the reply went on on another (app/failover.py).
CONTINUED_MARK = "↻"


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

    @property
    def replied(self) -> bool:
        return self.final is not None

    @property
    def complete(self) -> bool:
        """The final text is the streamed text, nothing lost or added, then the figures line."""
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


def user_step(text: str) -> dict:
    """A user message as the Chainlit frontend builds it."""
    return {"threadId": "", "id": str(uuid.uuid4()), "name": "User", "type": "user_message",
            "output": text, "createdAt": datetime.now(timezone.utc).isoformat(), "metadata": {}}


class ChatSession:
    """One chat of the app, seen as its browser tab would see it."""

    def __init__(self, record: SessionRecord):
        # Imported here: the CLI that lists this command also runs where only the engine
        # environment is (bench on a GPU machine), which has no python-socketio.
        import socketio
        self._socket_errors = (socketio.exceptions.SocketIOError, OSError)
        self.record = record
        # Offer permessage-deflate as browsers do: the app then compresses every frame.
        self.sio = socketio.AsyncClient(reconnection=False, request_timeout=CONNECT_TIMEOUT_S,
                                        websocket_extra_options={"compress": 15})
        self.sio.on("*", self._on_event)  # a plain function: handlers then run in arrival order
        self.sio.on("connect_error", self._on_refused)
        self.sio.on("disconnect", self._on_disconnect)
        self.refusal = ""  # why the app refused the connection: the exception does not say
        self.opened = asyncio.Event()     # on_chat_start ended (welcome or error) or the socket did
        self._starting = False            # on_chat_start runs (between its task_start and task_end)
        self.turn_done = asyncio.Event()
        self.sent_at: Optional[float] = None
        self._in_turn = False
        self._closing = False

    async def open(self, url: str, headers: Optional[dict] = None, thread_id: str = "") -> bool:
        """Connect and wait for the welcome; False (with the reason recorded) if it fails.

        ``headers`` carries cookies (a login, the balancer's worker pin); ``thread_id``
        reconnects to an existing chat, as a browser does after losing its connection.
        """
        started = time.perf_counter()
        try:
            await self.sio.connect(
                url, socketio_path=SOCKET_PATH, transports=["websocket"], wait_timeout=CONNECT_TIMEOUT_S,
                headers=headers or {},
                auth={"sessionId": str(uuid.uuid4()), "clientType": "webapp", "threadId": thread_id,
                      "userEnv": "{}", "chatProfile": ""})
            await self.sio.emit("connection_successful")
        except self._socket_errors as exc:
            self.record.error = connect_failure(self.refusal, exc)
            return False
        await self.opened.wait()
        self.record.open_s = time.perf_counter() - started
        return (self.record.welcomed or self.record.moved or self.record.resumed) and not self.record.error

    async def ask(self) -> None:
        self.sent_at = self.record.sent_at = time.perf_counter()
        try:
            await self.sio.emit("client_message", {"message": user_step(self.record.prompt),
                                                   "fileReferences": []})
        except self._socket_errors as exc:
            self.record.error = f"sending failed: {str(exc) or type(exc).__name__}"
            return
        await self.turn_done.wait()
        if not self.record.replied and not self.record.error:
            self.record.error = "the turn ended without a reply"

    def next_turn(self, prompt: str) -> None:
        """Forget the last turn's reply so ask() can send ``prompt`` in the same chat."""
        record = self.record
        record.prompt, record.reply_id, record.streamed, record.final, record.error = prompt, None, "", None, ""
        record.ttft_s = record.total_s = record.sent_at = None
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
        kind = (data.get("metadata") or {}).get("kind")
        if event == "first_interaction":
            record.thread_id = data.get("thread_id") or record.thread_id
        elif event == "resume_thread":  # a chat reopened from its saved steps: no welcome
            record.resumed = True
            self.opened.set()
        elif event == "task_start":
            self._in_turn = self.sent_at is not None
            self._starting = not self._in_turn
        elif event == "task_end":
            if self._in_turn:
                self.turn_done.set()
            else:
                self._starting = False
                self._open_when_started()
        elif event == "stream_start" and kind == "reply" and record.reply_id is None:
            record.reply_id, record.streamed = data["id"], data.get("output") or ""
            record.ttft_s = self._since_sent()
        elif event == "stream_token" and data.get("id") == record.reply_id:
            token = data.get("token") or ""
            record.streamed = token if data.get("isSequence") else record.streamed + token
        elif event in ("new_message", "update_message"):
            if kind == "welcome":
                record.welcomed = True
                self._open_when_started()
            elif kind == "moved":  # a chat resumed on another worker: it opens with this notice
                record.moved = True
                self.opened.set()
            elif kind == "error":
                record.error = "the app showed an error: " + (data.get("output") or "")[:200]
                self._open_when_started()
            elif kind == "reply" and record.reply_id in (None, data["id"]):
                # An empty reply is never streamed: it comes only as this message.
                record.reply_id, record.final = data["id"], data.get("output") or ""
                record.total_s = self._since_sent()

    def _open_when_started(self) -> None:
        """The chat is open once on_chat_start is over and its first message came, in either
        order: the app sends the welcome after on_chat_start's task_end (app/session_tasks.py)."""
        if (self.record.welcomed or self.record.error) and not self._starting:
            self.opened.set()

    def _on_refused(self, data=None) -> None:
        if isinstance(data, dict):  # the app's reason; a failed transport gives a plain string
            self.refusal = str(data.get("message", data))

    def _on_disconnect(self, reason=None) -> None:
        if not self._closing:
            self.record.error = self.record.error or "the app closed the connection"
            self.opened.set()
            self.turn_done.set()

    def _since_sent(self) -> Optional[float]:
        return None if self.sent_at is None else time.perf_counter() - self.sent_at


async def check_app(url: str) -> None:
    """Fail at once, with one message, where no chat could open.

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
    if auth["requireLogin"]:  # null without login, not false
        raise QaLoadError(f"The app at {url} requires login (ERNIE_CHAT_DB with users) and "
                          "qa-load opens chats without one: run it against an app without login.")


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
