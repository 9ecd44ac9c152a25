"""Caps on the uploads a chat and a user hold on the server, and a floor of free disk space.

Chainlit 2.12 keeps every upload of a chat in the chat's folder (app/web/files_dir.py) until
the chat ends, an hour after its browser left (``session_timeout``), and takes any number of
them: 30 uploads of 2 MiB went into one chat in 1.1 s.  Here an upload is refused, with what
to do, when it would take its chat or its user (the login name, else the client's address)
past a cap of files or MiB (ERNIE_UPLOAD_*), or leave less than ERNIE_UPLOAD_DISK_FREE_MB
free on the disk.  A file read into a message is deleted (app/conversation/answer.py), so the
caps count what waits to be sent: files attached and not sent yet, or taken off a message.

A worker counts what it holds in memory, each upload from before Chainlit writes it (uploads
sent at once cannot all pass before any is written) until its file is gone from disk (read,
or its chat ended).  The rule is a pure function; ``Uploads`` is the thin state around it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from server.settings import Settings

MIB = 2**20
# Uploads whose file is gone are forgotten when the count reaches this, or twice what it was
# after the last time: each upload's check stays cheap however many come and go.
SWEEP_AT_LEAST = 256


@dataclass(frozen=True)
class Caps:
    """0: that cap is off."""

    files_per_chat: int
    bytes_per_chat: int
    files_per_user: int
    bytes_per_user: int
    disk_free_bytes: int

    @classmethod
    def from_settings(cls, settings: Settings) -> "Caps":
        return cls(settings.upload_files_per_chat, settings.upload_mb_per_chat * MIB,
                   settings.upload_files_per_user, settings.upload_mb_per_user * MIB,
                   settings.upload_disk_free_mb * MIB)


@dataclass(frozen=True)
class Held:
    """One upload on disk, or being written (``path`` None)."""

    chat: str
    user: str
    size: int
    path: Optional[Path] = None

    def on_disk(self) -> bool:
        return self.path is None or self.path.exists()


@dataclass
class UploadRefused(Exception):
    status: int
    reason: str  # a key of app/texts/
    values: dict = field(default_factory=dict)


def refusal(caps: Caps, held: list[Held], chat: str, user: str, size: int,
            free_bytes: int) -> Optional[UploadRefused]:
    """Why ``user``'s upload of ``size`` bytes to ``chat`` may not be kept, or None; ``held``: the
    uploads on disk of that chat or that user."""
    if caps.disk_free_bytes and free_bytes - size < caps.disk_free_bytes:
        return UploadRefused(507, "upload_disk_full", {"floor_mb": caps.disk_free_bytes // MIB})
    for scope, mine, max_files, max_bytes in (
            ("chat", [h for h in held if h.chat == chat], caps.files_per_chat, caps.bytes_per_chat),
            ("user", [h for h in held if h.user == user], caps.files_per_user, caps.bytes_per_user)):
        if max_files and len(mine) >= max_files:
            return UploadRefused(413, f"upload_{scope}_files", {"limit": max_files})
        if max_bytes and sum(h.size for h in mine) + size > max_bytes:
            return UploadRefused(413, f"upload_{scope}_mb", {"limit_mb": max_bytes // MIB})
    return None


class Uploads:
    """What this worker holds: an upload is reserved before it is written, then given its path."""

    def __init__(self, caps: Caps, free_bytes: Callable[[], int]):
        self.caps, self.free_bytes = caps, free_bytes
        self.held: dict[int, Held] = {}
        self.sweep_at = SWEEP_AT_LEAST
        self._keys = itertools.count()

    def reserve(self, chat: str, user: str, size: int) -> int:
        """The upload's key; raises :class:`UploadRefused` when it may not be kept."""
        if len(self.held) >= self.sweep_at:
            self.held = {key: h for key, h in self.held.items() if h.on_disk()}
            self.sweep_at = max(SWEEP_AT_LEAST, 2 * len(self.held))
        theirs = [h for h in self.held.values() if (h.chat == chat or h.user == user) and h.on_disk()]
        if refused := refusal(self.caps, theirs, chat, user, size, self.free_bytes()):
            raise refused
        key = next(self._keys)
        self.held[key] = Held(chat, user, size)
        return key

    def written(self, key: int, path: Optional[Path]) -> None:
        """The upload is on disk at ``path``; None: it is not (failed, or its chat ended meanwhile)."""
        if path is None:
            del self.held[key]
        else:
            self.held[key] = replace(self.held[key], path=path)
