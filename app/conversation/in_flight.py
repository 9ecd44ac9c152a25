"""A reply in flight outlives its connection, and its process.

How a chat can lose the connection its reply streams to, and what keeps the reply:

- **The socket drops and comes back to the same worker** (a network blip; the
  balancer's sticky cookie): Chainlit restores the session by its id and points its
  emitter at the new socket (``chainlit/socket.py``, ``restore_existing_session``), so the
  reply's task streams on, unaware.  Frames sent while the socket was away are lost,
  but the finished reply is sent whole, and the browser replaces a message by its id.
  Chainlit's reconnect handler sends ``task_end`` though, so the handler :func:`install`
  wraps shows the Stop button again while the reply runs.
- **The page is reloaded** (same worker, a new session id): with saved chats the page is
  ``/thread/<id>`` and the chat resumes from its saved steps.  The reply still runs here,
  in :data:`REPLIES` by thread id: :func:`attach` points the old session's emitter at the
  new page, which is then sent the text so far, every next frame and the end, and takes
  over the old session's conversation (so the finished turn is in its history) and its
  task (so Stop reaches the reply).  Without saved chats a reload opens a new chat.
- **The worker dies**: the browser's socket comes back to another worker, which has none
  of the chat in memory.  While a reply streams, its text so far is written to a
  :class:`ReplyStore` every :data:`SAVE_EVERY_S` (less often in a crowd), with a marker
  (:class:`Marker`: which process writes it, when it last did, the sampling asked).  A
  worker that finds a marked reply whose writer has been quiet for :data:`QUIET_SAVES` of
  its intervals takes it over (:func:`wait_for_quiet`): it continues the text with vLLM's
  ``continue_final_message`` (app/engine/failover.py) into the same message, and the store ends
  up holding the whole reply.  Two stores, one takeover:

  - saved chats (app/kept/saved_chats.py, :class:`~app.kept.saved_chats.SavedSteps`): the reply's
    own step, the marker in its metadata; the worker that resumes the thread
    (``on_chat_resume``) finds it with :func:`orphan_of`;
  - chats without a database (app/kept/chat_files.py): a small private file per chat, keyed by
    a hash of the browser's session id, beside the chat's history; the browser's socket
    reconnects with the same session id, and the worker it reaches (``on_chat_start``,
    which sees that the page came from another process) finds the file by that id.

  What was shown after the last save (up to an interval's text) is written again by the
  continuation, so the browser's message may step back that far before it goes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Protocol

import chainlit as cl
from chainlit.emitter import ChainlitEmitter
from chainlit.session import WebsocketSession
from chainlit.user_session import user_sessions

from app.conversation.chat_settings import ChatParams
from app.conversation.history import Conversation
from app.conversation.token_batcher import STREAMING
from app.engine.continuation import continuation_request
from app.web.boot_cookie import BOOT_ID

LOG = logging.getLogger(__name__)

# A reply's text is saved every second, less often when many replies stream in this
# process: a save cost the app 1.3-2.4 ms of CPU (an UPDATE through Chainlit's SQLAlchemy
# layer, PostgreSQL on this machine; docs/chat.md, "What survives what"), so a process makes
# at most SAVES_PER_S of them a second, a few percent of a core, whatever the crowd.
SAVE_EVERY_S = 1.0
SAVES_PER_S = 50.0
# A writer quiet for this many of its own intervals is gone: a few missed saves.
QUIET_SAVES = 5.0
MARK = "in_flight"  # the metadata key of a reply still being written
# What a resumed page takes over from the session that streams its reply
# (app/conversation/chat_state.py).
SESSION_KEYS = ("conversation", "budget", "params", "server", "engine_model", "is_demo", "task",
                "asked_at")


@dataclass(frozen=True)
class Marker:
    """Who writes a reply in flight, when it last did, and the sampling it asked."""

    owner: str
    at: float
    every_s: float  # how often it saves
    temperature: float
    top_p: float
    max_tokens: int


@dataclass(frozen=True)
class Partial:
    """A reply its process left unfinished, as saved: what a takeover continues."""

    step_id: str
    text: str
    asked_id: str   # the user message it answers
    asked: str
    marker: Marker
    tokens: int = 0  # the text's, once counted (with_tokens)


def marker_of(metadata) -> Optional[Marker]:
    """The in-flight marker in a step's metadata (a dict, or JSON text from the database)."""
    if isinstance(metadata, str):
        metadata = json.loads(metadata or "{}")
    found = (metadata or {}).get(MARK)
    if not isinstance(found, dict):
        return None
    try:
        return Marker(owner=str(found["owner"]), at=float(found["at"]),
                      every_s=float(found["every_s"]), temperature=float(found["temperature"]), top_p=float(found["top_p"]),
                      max_tokens=int(found["max_tokens"]))
    except (KeyError, TypeError, ValueError):
        return None  # a marker this version did not write: not ours to continue


def orphan_of(thread: dict, boot_id: str = BOOT_ID) -> Optional[Partial]:
    """The chat's last reply if another process was still writing it when the thread was read."""
    asked: Optional[dict] = None
    last: Optional[Partial] = None
    for step in sorted(thread.get("steps") or [], key=lambda s: s.get("createdAt") or ""):
        if step.get("type") == "user_message":
            asked, last = step, None
        elif step.get("type") == "assistant_message" and asked is not None:
            marker = marker_of(step.get("metadata"))
            last = (Partial(step["id"], step.get("output") or "", asked["id"],
                            asked.get("output") or "", marker)
                    if marker is not None and marker.owner != boot_id else None)
    return last


def save_interval(streaming: int) -> float:
    """Seconds between two saves of a reply, with ``streaming`` replies in this process."""
    return max(SAVE_EVERY_S, streaming / SAVES_PER_S)


def quiet_for(marker: Marker, now: float) -> float:
    """Seconds left before the marker's writer counts as gone (0: now)."""
    return max(0.0, marker.at + QUIET_SAVES * marker.every_s - now)


# --- this process's replies ---------------------------------------------------------------

class ReplyStore(Protocol):
    """Where a chat is kept for another process to find: its reply in flight while it streams,
    and its history."""

    def keep(self, conversation: Conversation, params: ChatParams) -> None:
        """Keep the chat's history and settings as they are now (after a reply, a new setting)."""

    async def save(self, keeper: "Keeper", marker: Marker) -> None:
        """Write the reply's text so far with ``marker``."""

    async def ended(self, keeper: "Keeper") -> None:
        """The reply's stream ended (finished, stopped or failed): it is in flight no more."""

    async def current(self, partial: Partial) -> Optional[Partial]:
        """``partial`` as stored now; None once it is no longer in flight (a store that can
        show the page the finished reply does so)."""


@dataclass
class Keeper:
    """One reply streaming in this process: its registry entry and its stored text.

    ``send`` is the token batcher's output; use ``async with`` around the stream.  While it
    streams, the reply is saved to ``store`` every interval; on the way out the last save is
    awaited and the store is told the reply ended, so no marker outlives its stream.
    """

    reply: cl.Message
    marker: Callable[[float], Marker]  # for the interval the reply is saved at
    store: Optional[ReplyStore] = None
    asked: tuple[str, str] = ("", "")  # the user message it answers: id, text as the model got it
    session: WebsocketSession = field(default_factory=lambda: cl.context.session)
    _saver: Optional[asyncio.Task] = None
    writes: int = 0
    write_s: float = 0.0  # what the writes cost, for the log line at the end

    async def send(self, text: str, whole: bool = False) -> None:
        """Append ``text`` to the reply, or replace its text when ``whole`` (app/conversation/math_text)."""
        await self.reply.stream_token(text, is_sequence=whole)

    @property
    def thread_id(self) -> str:
        return self.session.thread_id

    async def __aenter__(self) -> "Keeper":
        REPLIES[self.thread_id] = self
        if not self.reply.created_at:  # a reply saved while it streams sorts after its question
            from chainlit.utils import utc_now
            self.reply.created_at = utc_now()
        if self.store is not None:
            self._saver = asyncio.create_task(self._save_while_streaming())
        return self

    async def __aexit__(self, *exc) -> None:
        if REPLIES.get(self.thread_id) is self:
            del REPLIES[self.thread_id]
        if self._saver is None:
            return
        self._saver.cancel()
        with suppress(asyncio.CancelledError):
            await self._saver
        await self.store.ended(self)
        if self.writes:
            LOG.debug("reply %s: %d saves, %.1f ms each", self.reply.id, self.writes,
                      1000 * self.write_s / self.writes)

    async def _save_while_streaming(self) -> None:
        while True:
            every_s = save_interval(STREAMING.count)
            started = time.perf_counter()
            try:
                await self.store.save(self, self.marker(every_s))
            except Exception as exc:  # the reply goes on; only its takeover is at risk
                LOG.warning("saving the reply in flight failed: %s", exc)
            self.write_s += time.perf_counter() - started
            self.writes += 1
            await asyncio.sleep(every_s)


REPLIES: dict[str, Keeper] = {}  # by thread id


def marker_now(temperature: float, top_p: float, max_tokens: int) -> Callable[[float], Marker]:
    return lambda every_s: Marker(BOOT_ID, time.time(), every_s, temperature, top_p, max_tokens)


async def attach(thread_id: str) -> bool:
    """Send the reply streaming for ``thread_id`` in this process to the current (resumed)
    page from now on; False if none streams.  Call it once the saved steps were sent."""
    keeper = REPLIES.get(thread_id)
    session = cl.context.session
    if keeper is None or keeper.session is session:
        return False
    old = keeper.session
    old.emit, old.emit_call = session.emit, session.emit_call
    mine = user_sessions.setdefault(session.id, {})
    for key in SESSION_KEYS:
        if key in user_sessions.get(old.id, {}):
            mine[key] = user_sessions[old.id][key]
    emitter = ChainlitEmitter(session)
    await emitter.task_start()
    await emitter.stream_start(keeper.reply.to_dict())  # the text so far, then each frame
    return True


def install() -> None:
    """Chainlit's reconnect handler sends ``task_end`` to a restored session: the Stop button
    goes while its reply still streams.  Show it again after that handler ran."""
    import chainlit.socket  # noqa: F401  (registers Chainlit's handlers on the server)
    from chainlit.server import sio
    chainlit_handler = sio.handlers["/"]["connection_successful"]

    async def connection_successful(sid):
        await chainlit_handler(sid)
        session = WebsocketSession.get(sid)
        task = user_sessions.get(session.id, {}).get("task") if session and session.restored else None
        if task is not None and not task.done():
            await ChainlitEmitter(session).task_start()

    sio.handlers["/"]["connection_successful"] = connection_successful


async def with_tokens(partial: Partial, count: Callable, messages: list[dict],
                      prompt_tokens: int) -> Partial:
    """``partial`` with its text's tokens, counted as the engine will take them: the prompt
    that ends with it (``messages`` fitted, ``prompt_tokens`` long, plus the text)."""
    if not partial.text:
        return partial
    ends_with_it = continuation_request(messages, partial.text, 0, 0).messages
    return replace(partial, tokens=max(0, await count(ends_with_it) - prompt_tokens))


async def wait_for_quiet(partial: Partial, store: ReplyStore, sleep=asyncio.sleep,
                         clock: Callable[[], float] = time.time) -> Optional[Partial]:
    """The reply as stored once its writer has been quiet long enough, to be continued;
    None if it wrote again meanwhile (it lives: only one process continues a reply) or
    the reply is no longer in flight (it finished, or it went)."""
    await sleep(quiet_for(partial.marker, clock()))
    now = await store.current(partial)
    if now is None or now.marker.at != partial.marker.at:
        return None
    return now
