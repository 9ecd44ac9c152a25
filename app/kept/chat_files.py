"""Chats without a database, kept on disk while they live, so that another worker of the box
can carry one on when its own dies (app/conversation/in_flight.py).

Without saved chats a chat lives in its worker's memory only.  Each chat also has, in a
private folder that every worker of the box sees (ERNIE_LIVE_CHATS_DIR), up to two small
files named by a hash of the browser's session id:

- ``<hash>.chat``: the model's history (app/conversation/history.py) and the chat's settings, written
  when a reply ends and when the settings change;
- ``<hash>.reply``: the reply in flight, what it answers and its marker
  (:class:`~app.conversation.in_flight.Marker`), written every save interval while it streams and
  removed when it ends: this is a :class:`~app.conversation.in_flight.ReplyStore`.

The browser's socket reconnects with the session id it was given when the page loaded,
to whichever worker the balancer picks; the worker there finds the files by that id,
takes the history over and continues a reply whose writer went quiet.  The session id is
client-chosen, so it never names a file itself (its SHA-256 does), and a file belongs to
its chat's user: a socket that brings someone else's session id gets a chat only where
that id's owner would (with login off the id is the secret, as it is for Chainlit's own
session restore; with login on, the user must match too).

The files go when the session ends in the worker that wrote them last; files of workers
that died and whose chat never came back are removed by the next worker to start, once
they are older than a session can be (Chainlit's session_timeout).  Writes are whole
files renamed into place, never fsync'd: a killed process loses nothing the kernel
already has, and a machine that goes down takes its chats' sockets with it anyway.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from app.conversation.chat_settings import ChatParams
from app.conversation.history import Conversation, Turn
from app.conversation.in_flight import MARK, Keeper, Marker, Partial, marker_of
from app.web.boot_cookie import BOOT_ID
from app.web.files_dir import is_worker
from server.private_files import DIR_MODE, FILE_MODE

LOG = logging.getLogger(__name__)

# More text than the largest context window holds (131,072 tokens at up to 6 bytes each in
# UTF-8) could never go into a prompt again: a file is at most this big; the history keeps
# its newest turns within it.
MAX_BYTES = 2 * 2**20
CHAT, REPLY, PART = ".chat", ".reply", ".part"


@dataclass(frozen=True)
class Kept:
    """A chat as its file holds it: what a new worker starts the session with."""

    conversation: Conversation
    params: ChatParams


def file_key(session_id: str) -> str:
    """The chat's files' name: never the client-chosen id itself."""
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


# --- what the files hold (pure) ---------------------------------------------------------

def chat_record(conversation: Conversation, params: ChatParams, user: Optional[str],
                max_bytes: int = MAX_BYTES) -> Optional[bytes]:
    """The chat file's bytes: the newest turns that fit ``max_bytes``; None if not even
    the settings do."""
    turns = [[t.user, t.assistant, t.figures] for t in conversation.turns]
    sizes = [size(t) for t in turns]  # each turn's, with the message it answered (asked)
    for message_id, (n, text) in conversation.asked.items():
        if n < len(sizes):
            sizes[n] += size([message_id, n, text])
    keep_from = 0
    while True:
        asked = [[message_id, n - keep_from, text] for message_id, (n, text) in conversation.asked.items()
                 if n >= keep_from]
        record = {"writer": BOOT_ID, "pid": os.getpid(), "user": user,
                  "system_prompt": conversation.system_prompt, "turns": turns[keep_from:],
                  "asked": asked, "params": asdict(params)}
        data = json.dumps(record, ensure_ascii=False).encode()
        if len(data) <= max_bytes:
            return data
        if keep_from == len(turns):
            return None
        over, dropped = len(data) - max_bytes, 0  # drop at once the oldest turns that cover it
        while keep_from < len(turns) and dropped < over:
            dropped += sizes[keep_from]
            keep_from += 1


def size(value) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode()) + 2


def kept_of(record: dict) -> Kept:
    """The chat a chat file's record holds (raises KeyError, TypeError, ValueError if it is
    not one this version wrote)."""
    turns = [Turn(str(user), str(assistant), dict(figures)) for user, assistant, figures in record["turns"]]
    asked = {str(message_id): (int(n), str(text)) for message_id, n, text in record["asked"]}
    params = ChatParams(**record["params"])
    return Kept(Conversation(str(record["system_prompt"]), turns, asked), params)


def reply_record(keeper: Keeper, marker: Marker, user: Optional[str]) -> bytes:
    asked_id, asked = keeper.asked
    return json.dumps({"writer": BOOT_ID, "pid": os.getpid(), "user": user, "id": keeper.reply.id,
                       "text": keeper.reply.content, "asked_id": asked_id, "asked": asked,
                       MARK: asdict(marker)}, ensure_ascii=False).encode()


def partial_of(record: dict) -> Optional[Partial]:
    marker = marker_of(record)
    if marker is None:
        return None
    try:
        return Partial(str(record["id"]), str(record["text"]), str(record["asked_id"]),
                       str(record["asked"]), marker)
    except (KeyError, TypeError):
        return None


# --- the folder ----------------------------------------------------------------------------

@dataclass
class ChatFolder:
    """The folder of the box's live chats."""

    folder: Path
    max_bytes: int = MAX_BYTES

    def open(self) -> "ChatFolder":
        """Make the folder (0700, as tight as an older one is made) and return self."""
        self.folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        self.folder.chmod(DIR_MODE)
        return self

    def chat(self, session_id: str, user: Optional[str]) -> "ChatFiles":
        return ChatFiles(self, file_key(session_id), user)

    def sweep(self, older_than_s: float, now: Optional[float] = None) -> list[Path]:
        """Remove the files that no live worker writes and nobody touched for
        ``older_than_s``: their chat is not coming back.  Returns them."""
        limit = (time.time() if now is None else now) - older_than_s
        gone = []
        for path in self.folder.iterdir():
            try:
                if path.lstat().st_mtime >= limit:
                    continue
                record = read_record(path, self.max_bytes) if path.suffix in (CHAT, REPLY) else None
                pid = record.get("pid") if record else None
                if isinstance(pid, int) and is_worker(pid):
                    continue  # a live worker's chat, idle for long
                path.unlink()
                gone.append(path)
            except OSError:
                continue  # another worker swept it first
        return gone


def read_record(path: Path, max_bytes: int) -> Optional[dict]:
    """The JSON object in ``path``; None if there is none, or it is not a plain file of at
    most ``max_bytes`` holding a JSON object."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with open(fd, "rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        LOG.warning("%s is over %d bytes: not read", path.name, max_bytes)
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def write_atomically(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` whole, or what it held before: never half of it."""
    part = path.with_name(f"{path.name}.{secrets.token_hex(4)}{PART}")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        with open(fd, "wb") as out:
            out.write(data)
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


# --- one chat's files ----------------------------------------------------------------------

@dataclass
class ChatFiles:
    """One chat's files: its history, and its reply in flight (a ReplyStore)."""

    chats: ChatFolder
    key: str
    user: Optional[str]  # the logged-in user's name; None without login
    _warned: bool = field(default=False, repr=False)

    @property
    def chat_file(self) -> Path:
        return self.chats.folder / f"{self.key}{CHAT}"

    @property
    def reply_file(self) -> Path:
        return self.chats.folder / f"{self.key}{REPLY}"

    def _mine(self, path: Path) -> Optional[dict]:
        """The file's record if it is this chat's user's."""
        record = read_record(path, self.chats.max_bytes)
        return record if record is not None and record.get("user") == self.user else None

    # the history

    def keep(self, conversation: Conversation, params: ChatParams) -> None:
        data = chat_record(conversation, params, self.user, self.chats.max_bytes)
        if data is None:
            LOG.warning("a chat's settings alone are over %d bytes: not kept", self.chats.max_bytes)
            return
        try:
            write_atomically(self.chat_file, data)
        except OSError as exc:  # the chat goes on; only a move would lose its history
            LOG.warning("keeping a chat's history failed: %s", exc)

    def restore(self) -> Optional[Kept]:
        record = self._mine(self.chat_file)
        try:
            return kept_of(record) if record is not None else None
        except (KeyError, TypeError, ValueError):
            return None  # a file this version did not write

    def forget(self) -> None:
        """The session ended here: its files go, unless another worker writes them now."""
        for path in (self.chat_file, self.reply_file):
            record = read_record(path, self.chats.max_bytes)
            if record is not None and record.get("writer") == BOOT_ID:
                path.unlink(missing_ok=True)

    # the reply in flight

    def orphan(self, boot_id: str = BOOT_ID) -> Optional[Partial]:
        """The chat's reply in flight, if another process was writing it."""
        record = self._mine(self.reply_file)
        partial = partial_of(record) if record is not None else None
        return partial if partial is not None and partial.marker.owner != boot_id else None

    async def save(self, keeper: Keeper, marker: Marker) -> None:
        data = reply_record(keeper, marker, self.user)
        if len(data) > self.chats.max_bytes:
            if not self._warned:
                LOG.warning("a reply in flight is over %d bytes: not kept", self.chats.max_bytes)
                self._warned = True
            return
        write_atomically(self.reply_file, data)

    async def ended(self, keeper: Keeper) -> None:
        record = read_record(self.reply_file, self.chats.max_bytes)
        if record is not None and record.get("id") == keeper.reply.id:
            self.reply_file.unlink(missing_ok=True)

    async def current(self, partial: Partial) -> Optional[Partial]:
        record = self._mine(self.reply_file)
        now = partial_of(record) if record is not None else None
        return now if now is not None and now.step_id == partial.step_id else None


def install(chats: ChatFolder) -> None:
    """A chat's files go when Chainlit ends its session here (at the latest session_timeout
    after its socket left)."""
    from chainlit.session import WebsocketSession
    chainlit_delete = WebsocketSession.delete

    async def delete(session: WebsocketSession) -> None:
        chats.chat(session.id, None).forget()
        await chainlit_delete(session)

    WebsocketSession.delete = delete
