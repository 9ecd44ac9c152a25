"""What the app's socket.io events mean for one chat: Chainlit 2.12's, as the app sends them.

A :class:`ChatEvents` follows one chat as its browser tab does: when it is open (its start
over and its first message shown), its reply streaming and ending, the app's refusals,
notices and errors, and a reply shown again after its socket came back. It reads events
only; the socket that brings them, and sends the messages, is ``chat_socket.ChatSession``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Optional

from server.loadtest.lib.chat_record import REFUSALS, SHOWN_ERROR, TAG, SessionRecord

# Events that carry a chat message's id: the ones that must never reach another chat.
MESSAGE_EVENTS = {"new_message", "update_message", "delete_message", "stream_start", "stream_token"}


class ChatEvents:
    """One chat's state, from the app's events in the order they came."""

    def __init__(self, record: SessionRecord):
        self.record = record
        self._rejoining = False           # the next task_end is the reconnect's, not the turn's
        self._rejoined = asyncio.Event()  # the app shows the turn goes on after a reconnect
        self.opened = asyncio.Event()     # on_chat_start ended (welcome or error) or the socket did
        self._starting = False            # on_chat_start runs (between its task_start and task_end)
        self.turn_done = asyncio.Event()
        self.sent_at: Optional[float] = None
        self._in_turn = False

    def next_turn(self, prompt: str) -> None:
        """Forget the last turn's reply so ask() can send ``prompt`` in the same chat."""
        record = self.record
        record.prompt, record.reply_id, record.streamed, record.final, record.error = prompt, None, "", None, ""
        record.refused, record.busy_waited, record.notice = "", False, ""
        record.reconnects = 0
        record.ttft_s = record.total_s = record.sent_at = self.sent_at = None
        self.turn_done.clear()
        self._in_turn = False

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
                    # the app says. A kept chat's reply shows again (app/kept/chat_files.py).
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
        order: the app sends the welcome after on_chat_start's task_end (app/web/session_tasks.py)."""
        if (self.record.welcomed or self.record.moved or self.record.error) and not self._starting:
            self.opened.set()

    def _since_sent(self) -> Optional[float]:
        return None if self.sent_at is None else time.perf_counter() - self.sent_at
