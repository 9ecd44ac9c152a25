"""``ernie-chat qa-load``: many chats at once through the app's own websocket.

``bench`` loads the engine; this loads the chat app the way browsers do, and
checks what a tester would check by eye in N browser tabs: every chat gets a
reply, the whole reply, and only its own.  No browser: each chat is a
socket.io client speaking Chainlit 2.12's protocol, as read in chainlit's
``socket.py``, ``emitter.py``, ``message.py`` and its frontend bundle:

* connect to ``/ws/socket.io`` with ``auth`` = sessionId (a fresh uuid4),
  clientType, threadId, userEnv (a JSON string) and chatProfile, then emit
  ``connection_successful``: that is what runs ``on_chat_start`` (our welcome);
* a user message is ``client_message`` with ``{"message": <step>, "fileReferences": []}``,
  the step carrying a uuid4 ``id``, ``type: user_message`` and the text in ``output``;
* the app answers ``task_start``; the reply's first text arrives in
  ``stream_start`` (the whole step, ``output`` = first chunk), the rest in
  ``stream_token`` ``{id, token}``; ``Message.send()`` at the end emits
  ``new_message`` with the same id and the final text, then ``task_end``.
  Opening a chat sends task events of its own: ``task_end`` for
  ``connection_successful``, then ``task_start`` ... welcome ... ``task_end``
  around ``on_chat_start``.  A chat is open once that last one came (the welcome
  alone could still be followed by on_chat_start's ``task_end``, which would be
  taken for the end of our turn), and only a ``task_end`` after the
  ``task_start`` that follows our message ends the turn.

All chats connect and get their welcome first, then all send at once: the
replies are generated together, which is the load the check is about.  Each
prompt starts with a tag naming its run and chat, so text that reaches the
wrong chat can be recognised if the model echoes it; message ids seen by more
than one chat are the other sign of crossing.

TTFT here is what a user feels: from sending the message to the first reply
text on the socket, the app's work (token counting, history fitting, token
batching) included.  The load goes to the one URL given (default: the app of
the settings, which is on this machine) and is bounded by ``--sessions`` and
``--timeout-s``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import httpx

from server.bench_stats import distribution_ms
from server.progress import StatusLine

SOCKET_PATH = "/ws/socket.io"
# A typo (10000) must not open thousands of sockets from a tester's machine.
MAX_SESSIONS = 1000
# Connecting many sockets at once on a busy small machine takes seconds, not the default 1 s.
CONNECT_TIMEOUT_S = 30.0
# Events that carry a chat message's id: the ones that must never reach another chat.
MESSAGE_EVENTS = {"new_message", "update_message", "delete_message", "stream_start", "stream_token"}
# app/chat.py ends a finished reply with the figures (app/texts.figures_line) as a paragraph
# of their own, which gives the speed in tok/s in every language.
FIGURES_TAIL = re.compile(r"\n\n[^\n]*tok/s[^\n]*")
TAG = re.compile(r"\[qa [0-9a-f]{6} s\d+\]")
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


class QaLoadError(RuntimeError):
    """A run that cannot start (bad arguments, empty prompts file); the message says why."""


@dataclass
class SessionRecord:
    """What one chat saw; ``open_s`` from connecting, the other times from sending its message."""

    index: int
    tag: str
    prompt: str
    welcomed: bool = False
    open_s: Optional[float] = None  # connect to welcome: what a new browser tab waits
    ttft_s: Optional[float] = None
    total_s: Optional[float] = None
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

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(message_ids=sorted(self.message_ids), tags_seen=sorted(self.tags_seen),
                   replied=self.replied, complete=self.complete)
        return out


# --- the figures (pure) -----------------------------------------------------------

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


def summarize(records: list[SessionRecord], wall_s: float) -> dict:
    """The run's verdict: ``ok`` only when every chat got its own complete reply."""
    replied = [r for r in records if r.replied]
    complete = [r for r in replied if r.complete]
    errors = [r for r in records if r.error]
    reasons: dict[str, int] = {}
    for record in errors:
        reasons[record.error] = reasons.get(record.error, 0) + 1
    summary = {
        "sessions": len(records),
        "welcomed": sum(r.welcomed for r in records),
        "replied": len(replied),
        "complete": len(complete),
        "incomplete": len(replied) - len(complete),
        "lost": len(records) - len(replied),
        "crossed": count_crossed(records),
        "errors": len(errors),
        "error_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "wall_s": wall_s,
        "open_ms": distribution_ms(r.open_s for r in records if r.open_s is not None),
        "ttft_ms": distribution_ms(r.ttft_s for r in records if r.ttft_s is not None),
        "total_ms": distribution_ms(r.total_s for r in replied if r.total_s is not None),
    }
    summary["ok"] = bool(records) and all(
        summary[k] == 0 for k in ("incomplete", "lost", "crossed", "errors"))
    return summary


def progress_text(records: list[SessionRecord]) -> str:
    return (f"{len(records)} chats: {sum(r.welcomed for r in records)} open, "
            f"{sum(r.ttft_s is not None and not r.replied for r in records)} streaming, "
            f"{sum(r.replied for r in records)} replied, {sum(bool(r.error) for r in records)} errors")


# --- one chat -------------------------------------------------------------------------

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
        self.sio = socketio.AsyncClient(reconnection=False, request_timeout=CONNECT_TIMEOUT_S)
        self.sio.on("*", self._on_event)  # a plain function: handlers then run in arrival order
        self.sio.on("connect_error", self._on_refused)
        self.sio.on("disconnect", self._on_disconnect)
        self.refusal = ""  # why the app refused the connection: the exception does not say
        self.opened = asyncio.Event()     # on_chat_start ended (welcome or error) or the socket did
        self.turn_done = asyncio.Event()
        self.sent_at: Optional[float] = None
        self._in_turn = False
        self._closing = False

    async def open(self, url: str) -> bool:
        """Connect and wait for the welcome; False (with the reason recorded) if it fails."""
        started = time.perf_counter()
        try:
            await self.sio.connect(
                url, socketio_path=SOCKET_PATH, transports=["websocket"], wait_timeout=CONNECT_TIMEOUT_S,
                auth={"sessionId": str(uuid.uuid4()), "clientType": "webapp", "threadId": "",
                      "userEnv": "{}", "chatProfile": ""})
            await self.sio.emit("connection_successful")
        except self._socket_errors as exc:
            self.record.error = connect_failure(self.refusal, exc)
            return False
        await self.opened.wait()
        self.record.open_s = time.perf_counter() - started
        return self.record.welcomed and not self.record.error

    async def ask(self) -> None:
        self.sent_at = time.perf_counter()
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
        record.ttft_s = record.total_s = None
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
        if event == "task_start" and self.sent_at is not None:
            self._in_turn = True
        elif event == "task_end":
            if self._in_turn:
                self.turn_done.set()
            elif record.welcomed or record.error:  # on_chat_start is over
                self.opened.set()
        elif event == "stream_start" and kind == "reply" and record.reply_id is None:
            record.reply_id, record.streamed = data["id"], data.get("output") or ""
            record.ttft_s = self._since_sent()
        elif event == "stream_token" and data.get("id") == record.reply_id:
            token = data.get("token") or ""
            record.streamed = token if data.get("isSequence") else record.streamed + token
        elif event in ("new_message", "update_message"):
            if kind == "welcome":
                record.welcomed = True
            elif kind == "error":
                record.error = "the app showed an error: " + (data.get("output") or "")[:200]
            elif kind == "reply" and record.reply_id in (None, data["id"]):
                # An empty reply is never streamed: it comes only as this message.
                record.reply_id, record.final = data["id"], data.get("output") or ""
                record.total_s = self._since_sent()

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


def connect_failure(refusal: str, exc: BaseException) -> str:
    if refusal:
        return f"the app refused the connection: {refusal}"
    return f"connect failed: {str(exc) or type(exc).__name__}"


# --- the whole run ------------------------------------------------------------------

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


def make_records(prompts: list[str], sessions: int) -> list[SessionRecord]:
    """One record per chat; prompts are used in turn, each behind its chat's tag."""
    run = secrets.token_hex(3)  # two runs at once never share a tag
    records = []
    for i in range(sessions):
        tag = f"[qa {run} s{i:03d}]"
        records.append(SessionRecord(i, tag, f"{tag} {prompts[i % len(prompts)]}"))
    return records


async def run_load(url: str, prompts: list[str], sessions: int, timeout_s: float) -> dict:
    """Open ``sessions`` chats, then ask in all of them at once; the result of ``--json``."""
    if not 1 <= sessions <= MAX_SESSIONS:
        raise QaLoadError(f"--sessions must be between 1 and {MAX_SESSIONS}.")
    if timeout_s <= 0 or not prompts:
        raise QaLoadError("--timeout-s must be positive and there must be at least one prompt.")
    url = url.rstrip("/")
    await check_app(url)
    records = make_records(prompts, sessions)
    chats = [ChatSession(record) for record in records]
    # On stderr: with --json, stdout is the result alone.
    status = StatusLine("qa-load", stream=sys.stderr, plain_every_s=5.0)

    async def tick() -> None:
        while True:
            status.update(progress_text(records))
            await asyncio.sleep(0.5)

    async def converse() -> None:
        opened = await asyncio.gather(*(chat.open(url) for chat in chats))
        await asyncio.gather(*(chat.ask() for chat, ok in zip(chats, opened) if ok))

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    try:
        await asyncio.wait_for(converse(), timeout_s)
    except asyncio.TimeoutError:
        for record in records:
            if not record.replied and not record.error:
                record.error = f"no reply within --timeout-s {timeout_s:g}"
    finally:
        wall_s = time.perf_counter() - started
        ticker.cancel()
        await asyncio.gather(ticker, *(chat.close() for chat in chats), return_exceptions=True)
    summary = summarize(records, wall_s)
    status.done(progress_text(records))
    return {"kind": "ernie-chat qa-load", "url": url, "summary": summary,
            "sessions": [r.as_dict() for r in records]}


# --- results ----------------------------------------------------------------------------

def render(result: dict) -> str:
    s = result["summary"]
    ms = lambda d, k: "-" if d[k] is None else f"{d[k]:.0f}"
    lines = [
        f"{s['sessions']} chats at {result['url']} in {s['wall_s']:.1f} s "
        f"(opening one: p50 {ms(s['open_ms'], 'median')} ms, p99 {ms(s['open_ms'], 'p99')} ms)",
        f"  opened {s['welcomed']}   complete replies {s['complete']}/{s['sessions']}   "
        f"lost {s['lost']}   crossed {s['crossed']}   incomplete {s['incomplete']}   "
        f"errors {s['errors']}",
        f"  TTFT ms  p50 {ms(s['ttft_ms'], 'median')}  p99 {ms(s['ttft_ms'], 'p99')}   "
        f"total ms  p50 {ms(s['total_ms'], 'median')}  p99 {ms(s['total_ms'], 'p99')}",
    ]
    lines += [f"  {n} x {reason}" for reason, n in s["error_reasons"].items()]
    lines.append("PASS" if s["ok"] else "FAIL")
    return "\n".join(lines)


def read_prompts(path: Optional[Path]) -> list[str]:
    """One prompt per non-empty line of the file, or the built-in ones."""
    if path is None:
        return list(DEFAULT_PROMPTS)
    prompts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        raise QaLoadError(f"{path} has no prompt (one per line).")
    return prompts


# --- the command line -------------------------------------------------------------------

def add_parser(sub) -> None:
    qa = sub.add_parser(
        "qa-load", help="open many chats in the app at once and check every reply",
        description="Open N chats through the app's websocket (no browser), send a different "
        "prompt in each at once, and check that every chat gets its own reply, complete. "
        "Exit code 1 if any reply is lost, incomplete or crossed, or a chat failed.")
    qa.add_argument("--url", help="the chat app (default: ERNIE_APP_HOST/ERNIE_APP_PORT's)")
    qa.add_argument("--sessions", type=int, default=100,
                    help=f"chats opened at once (default 100, at most {MAX_SESSIONS})")
    qa.add_argument("--prompts-file", type=Path, help="one prompt per line, used in turn")
    qa.add_argument("--timeout-s", type=float, default=300.0,
                    help="give up on the whole run after this long (default 300)")
    qa.add_argument("--json", action="store_true", help="print the result, every chat included, as JSON")
    qa.set_defaults(func=cmd_qa_load)


def cmd_qa_load(args: argparse.Namespace) -> int:
    try:
        if args.url:
            url = args.url
        else:
            from server.settings import load_settings
            url = load_settings().app_url
        result = asyncio.run(run_load(url, read_prompts(args.prompts_file), args.sessions,
                                      args.timeout_s))
    except (QaLoadError, OSError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1, ensure_ascii=False) if args.json else render(result))
    return 0 if result["summary"]["ok"] else 1
