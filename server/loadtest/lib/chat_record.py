"""What one chat of ``qa-load`` saw, and what became of its message (pure).

A :class:`SessionRecord` per chat, filled in by the chat's socket (``chat_socket``), sent
between client processes as JSON, and judged here: complete, continued, failed or lost
(``outcome_of``), and whether a message reached a chat it does not belong to
(``count_crossed``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Optional

# app/conversation/answer.py ends a finished reply with the figures (app/texts.figures_line) as a paragraph
# of their own, which gives the speed in tok/s in every language.
FIGURES_TAIL = re.compile(r"\n\n[^\n]*tok/s[^\n]*")
SHOWN_ERROR = "the app showed an error: "
TAG = re.compile(r"\[qa [0-9a-f]{6} s\d+\]")
# The reply's token count in its figures line: "... + 212 reply tokens" / "... + 回复 212 个 token".
REPLY_TOKENS = re.compile(r"\+ (?:回复 )?(\d+)")
# Starts app/texts "continued" in the figures line, in every language: the reply's engine
# stopped and the reply went on on another (app/engine/failover.py).
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
    reconnects: int = 0            # times its socket came back after dropping
    # Times a socket opened again between two messages closed before the chat opened on it,
    # and another was opened (chat_socket.REOPEN_TRIES): the chat's, over all its messages.
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


# The app's answers instead of a reply (app/conversation/admission.py limit_hit, by their message's kind): the
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

